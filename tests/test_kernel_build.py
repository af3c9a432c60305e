"""The CUDA sources compile for both machine-code targets (sm_90a, sm_120a) and as compute_80
PTX that ptxas accepts for sm_80 (what the driver compiles on GPUs without machine code in the
library) on a machine without a GPU, and the ctypes mirror of the params struct matches the C
layout."""

import ctypes
import shutil
import subprocess

import pytest

from kdtree import build
from kdtree.verify_op import VerifyParams


def nvcc_or_skip():
    try:
        return build.nvcc_path()
    except FileNotFoundError as exc:
        pytest.skip(f"not run: {exc}")


def test_kernel_compiles_for_sm90a_and_sm120a(tmp_path):
    """The shipped build's targets (each switch alone: test_kernel_switches.py)."""
    nvcc_or_skip()
    out = tmp_path / "libkdtree_verify.so"
    build.compile_library(out)
    assert out.stat().st_size > 10_000
    # nvcc fails if either -gencode target fails; where cuobjdump exists, also list them
    cuobjdump = shutil.which("cuobjdump")
    if cuobjdump:
        listing = subprocess.run([cuobjdump, "--list-elf", str(out)], capture_output=True, text=True)
        assert "sm_90a" in listing.stdout and "sm_120a" in listing.stdout, listing.stdout


def test_build_hash_tracks_sources_and_defines():
    nvcc_or_skip()
    assert len(build.build_hash()) == 12
    assert build.build_hash() != build.build_hash(("KDTREE_FAULT_MASK_SHIFT",))


def test_params_layout_matches_the_c_struct(tmp_path):
    cxx = shutil.which("g++")
    if cxx is None:
        pytest.skip("not run: g++ not found")
    names = [name for name, _ in VerifyParams._fields_]
    program = tmp_path / "layout.cpp"
    program.write_text(
        '#include <cstdio>\n#include <cstddef>\n#include "verify_params.h"\n'
        "int main() {\n"
        + "".join(f'  std::printf("%zu\\n", offsetof(kdtree::VerifyParams, {n}));\n' for n in names)
        + '  std::printf("%zu\\n", sizeof(kdtree::VerifyParams));\n}\n')
    exe = tmp_path / "layout"
    subprocess.run([cxx, "-std=c++17", f"-I{build.source_dir()}", str(program), "-o", str(exe)], check=True)
    got = [int(x) for x in subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()]
    want = [getattr(VerifyParams, n).offset for n in names] + [ctypes.sizeof(VerifyParams)]
    assert got == want


def test_the_ptx_assembles_for_sm80(tmp_path):
    """nvcc writes PTX for code=compute_80 without assembling it; the driver assembles it on
    the GPU. ptxas here finds what would fail there (an sm_90-only instruction left unguarded)."""
    nvcc = nvcc_or_skip()
    ptxas = shutil.which("ptxas") or str(__import__("pathlib").Path(nvcc).with_name("ptxas"))
    ptx = tmp_path / "verify.ptx"
    subprocess.run([nvcc, "-O3", "-std=c++17", "-gencode=arch=compute_80,code=compute_80", "-ptx",
                    "-o", str(ptx), str(build.source_dir() / build.ENTRY)], check=True)
    done = subprocess.run([ptxas, "-arch=sm_80", str(ptx), "-o", str(tmp_path / "verify.cubin")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
