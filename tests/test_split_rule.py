"""split_plan.h's splits_idle_from(): its division-free form (the short layout's decision and
cta_work()'s half_idle) says the same as split_range() itself. A host program built with nvcc
from the shipped header compares the two over split counts, first splits and lengths, and
over the chunk sizes the paths use."""

import subprocess

import pytest

from kdtree import build

PROGRAM = r"""
#include <cstdint>
#include <cstdio>
#include "split_plan.h"
using namespace kdtree;
int main() {
  const int64_t shapes[][2] = {{128, 64}, {128, 32}, {64, 64}, {32, 32}, {0, 32}};  // min_chunk, tile
  long long checked = 0, wrong = 0;
  for (const auto& s : shapes)
    for (int64_t splits = 1; splits <= 200; ++splits)
      for (int64_t first = 0; first <= splits; first += 1 + splits / 9)
        for (int64_t length = 0; length <= 30000; length += 7) {
          int64_t begin, end;
          split_range(length, splits, first, &begin, &end, s[0], s[1]);
          wrong += splits_idle_from(length, splits, first, s[0], s[1]) != (begin >= end);
          ++checked;
        }
  std::printf("%lld checked, %lld wrong\n", checked, wrong);
  return wrong != 0;
}
"""


def test_division_free_rule_matches_split_range(tmp_path):
    try:
        nvcc = build.nvcc_path()
    except FileNotFoundError as exc:
        pytest.skip(f"not run: {exc}")
    source = tmp_path / "split_rule.cu"
    source.write_text(PROGRAM)
    binary = tmp_path / "split_rule"
    built = subprocess.run([nvcc, "-std=c++17", "-O2", "-I", str(build.source_dir()), "-o", str(binary), str(source)],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stdout + built.stderr
    done = subprocess.run([str(binary)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert " 0 wrong" in done.stdout and not done.stdout.startswith("0 checked"), done.stdout
