"""Issue #7's performance targets, checked on one benchmark result: ``kdtree-gate targets
bench.json`` (a saved ``kdgate.perf_bench`` result), and the last section of every
``bench.md``.

Each target is a threshold on a figure the benchmark measured in one run: fractions of that
run's copy and matmul ceilings, speedups over SGLang's kernels on the same inputs, the
combine's share of a call, the layer loop's time per call. A case can also be out of reach
for any kernel under this timing: a call is one CUDA graph replay after a read flush (and,
under code-warm timing, one call of the same code on other inputs), or under rotated timing
one of many calls back to back in a graph, and a call of one kernel that does no work
already takes the run's launch floor L (``launch_floor.one_kernel_us``, per call of such a
loop under rotated timing). Counting L as overhead that no work overlaps, a case whose
roofline floor is f µs can reach at most t / (f + L) of a ceiling whose own floor is t µs
(t = f for the ceiling that sets the floor).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Callable

from kdgate.saved_result_command import run_on_saved_result

LONG_CONTEXT = 16384   # "ctx >= 16k"
CHAIN_CONTEXT = 4096   # chains: "ctx >= 4k"
EXTEND_CASE = "bs1-ctx64k-n16-h8-tree-p64"


def _long(case: dict) -> bool:
    return case["ctx"] >= LONG_CONTEXT


def _time(case: dict) -> float:
    return case["kernel"]["median_us"]


def _best_fraction(which: str) -> Callable[[dict, float], float]:
    """The most of ceiling `which` ("bandwidth", "matmul" or "roofline") a call of this
    case can reach when it takes at least its roofline floor plus the launch floor L."""
    def best(case: dict, launch_us: float) -> float:
        f = case["figures"]
        floor = f["floor_us"]
        own = {"bandwidth": f["bandwidth_fraction"] * _time(case),  # bytes / copy bandwidth
               "matmul": f["matmul_fraction"] * _time(case),        # FLOPs / matmul rate
               "roofline": floor}[which]
        return own / (floor + launch_us)
    return best


@dataclass(frozen=True)
class Target:
    """One target: cases it applies to, the figure it reads and the threshold it needs
    (``at_least``: figure >= threshold, else figure <= threshold)."""

    key: str
    text: str
    threshold: float
    at_least: bool
    applies: Callable[[dict], bool]
    figure: Callable[[dict], float | None]
    best_possible: Callable[[dict, float], float] | None = None

    def meets(self, value: float) -> bool:
        return value >= self.threshold if self.at_least else value <= self.threshold


TARGETS = (
    Target("memory", "ctx >= 16k, memory-bound (N·H <= 64): >= 0.80 of the copy bandwidth", 0.80, True,
           lambda c: _long(c) and c["n"] * c["heads"] <= 64, lambda c: c["figures"]["bandwidth_fraction"],
           _best_fraction("bandwidth")),
    Target("compute", "ctx >= 16k, compute-bound (N·H >= 128): >= 0.55 of the bf16 matmul rate", 0.55, True,
           lambda c: _long(c) and c["n"] * c["heads"] >= 128, lambda c: c["figures"]["matmul_fraction"],
           _best_fraction("matmul")),
    Target("roofline", "ctx >= 16k, every shape: >= 0.60 of the roofline floor", 0.60, True,
           _long, lambda c: c["figures"]["roofline_fraction"], _best_fraction("roofline")),
    Target("extend", "bs 1, ctx 64k, N 16, H 8: >= 200x faster than extend_attention_fwd", 200.0, True,
           lambda c: c["id"] == EXTEND_CASE, lambda c: c.get("speedup_extend")),
    Target("chains", "chains, ctx >= 4k: >= 1.5x faster than verify_shared_kv_fwd", 1.5, True,
           lambda c: c["shape"] == "chain" and c["ctx"] >= CHAIN_CONTEXT, lambda c: c.get("speedup_verify_shared")),
    Target("combine", "ctx >= 16k: combine <= 10 % of the call (replayed alone)", 0.10, False,
           _long, lambda c: c.get("combine_share")),
    Target("combine-in-call", "ctx >= 16k: combine <= 10 % of the call (what it adds inside it)", 0.10, False,
           _long, lambda c: c.get("combine_in_call_share")),
)
LAYER_LOOP_US = 10.0


@dataclass
class Outcome:
    """A target on one result: case ids that meet it, (id, figure) of those that do not
    (nearest the threshold first), ids no kernel can bring to it under this timing (among
    the unmet), and ids whose figure the run did not measure (a baseline that did not run)."""

    target: Target
    met: list[str] = field(default_factory=list)
    unmet: list[tuple[str, float]] = field(default_factory=list)
    out_of_reach: list[str] = field(default_factory=list)
    not_measured: list[str] = field(default_factory=list)

    @property
    def cases(self) -> int:
        return len(self.met) + len(self.unmet)


def evaluate(result: dict) -> tuple[list[Outcome], dict | None]:
    """Every target on ``result``; returns the case outcomes and the layer loop's
    ({per_call_us, threshold_us, met}, or None when the run has no layer loop). ValueError
    naming the field when ``result`` is not a benchmark result."""
    if not isinstance(result, dict) or not isinstance(result.get("cases"), list):
        raise ValueError("result: expected a benchmark result with a 'cases' list")
    launch_us = (result.get("launch_floor") or {}).get("one_kernel_us")
    outcomes = []
    for target in TARGETS:
        out = Outcome(target)
        for case in result["cases"]:
            if not target.applies(case):
                continue
            value = target.figure(case)
            if value is None:
                out.not_measured.append(case["id"])
            elif target.meets(value):
                out.met.append(case["id"])
            else:
                out.unmet.append((case["id"], value))
                if (target.best_possible is not None and launch_us is not None
                        and not target.meets(target.best_possible(case, launch_us))):
                    out.out_of_reach.append(case["id"])
        out.unmet.sort(key=lambda item: abs(item[1] - target.threshold))
        outcomes.append(out)
    loop = result.get("layer_loop")
    loop_outcome = None
    if loop:
        loop_outcome = {"per_call_us": loop["per_call_us"], "threshold_us": LAYER_LOOP_US,
                        "met": loop["per_call_us"] <= LAYER_LOOP_US}
    return outcomes, loop_outcome


def _figure(value: float, target: Target) -> str:
    return f"{value:.1f}×" if target.threshold >= 1 else f"{value:.3f}"


def describe(result: dict, nearest: int = 3) -> str:
    """The targets as a Markdown table: met / cases, how many of the rest no kernel can
    reach under this timing, and the ``nearest`` misses."""
    return _table(result, *evaluate(result), nearest)


def _table(result: dict, outcomes: list[Outcome], loop: dict | None, nearest: int = 3) -> str:
    launch_us = (result.get("launch_floor") or {}).get("one_kernel_us")
    reach = (f"out of reach at the launch floor ({launch_us:.2f} µs)" if launch_us is not None
             else "out of reach (no launch floor in this run)")
    lines = ["Issue #7 targets in this run:", "",
             f"| target | met | {reach} | nearest misses |", "|---|---|---|---|"]
    for out in outcomes:
        if not out.cases and not out.not_measured:
            continue
        met = f"{len(out.met)}/{out.cases}" + (f" ({len(out.not_measured)} not measured)" if out.not_measured else "")
        misses = ", ".join(f"{case_id} {_figure(v, out.target)}" for case_id, v in out.unmet[:nearest]) or "-"
        far = str(len(out.out_of_reach)) if out.target.best_possible is not None and launch_us is not None else "-"
        lines.append(f"| {out.target.text} | {met} | {far} | {misses} |")
    if loop:
        lines.append(f"| layer loop (bs 1, ctx 1k, N 8, H 8, in a CUDA graph): <= {loop['threshold_us']:.0f} µs "
                     f"per call | {'yes' if loop['met'] else 'no'} ({loop['per_call_us']:.2f} µs) | - | - |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``kdtree-gate targets BENCH_JSON``: prints the table; exit 0 when every target holds,
    1 when one does not, 2 when the file is not a benchmark result."""
    argv = list(sys.argv[1:] if argv is None else argv)

    def render(result: dict) -> tuple[str, int]:
        outcomes, loop = evaluate(result)
        all_met = all(not out.unmet and not out.not_measured for out in outcomes) and (loop is None or loop["met"])
        return _table(result, outcomes, loop), 0 if all_met else 1

    return run_on_saved_result(argv, "targets", "issue #7's targets on a saved benchmark result", render)


if __name__ == "__main__":
    sys.exit(main())
