"""Same-run A/B of kernel builds: ``kdtree-gate ab`` (or ``python -m kdgate.build_ab``).

The shipped kernel against builds of the same sources with preprocessor switches
(``-D`` defines), in one process on one GPU: per case, one CUDA graph per build, their
replays taking turns after the 512 MiB read flush (gpu_timing.time_interleaved), the
median of ``--reps``; the 61-call layer loop per build; and each build's output against
the shipped one's (largest absolute difference; 0 when a switch changes only launches).
Three of the kernel's switches are the default builds, so what each design choice buys can
be re-measured:

* ``KDTREE_SERIAL_LAUNCH``: ordinary launches instead of programmatic dependent ones.
* ``KDTREE_NO_BALANCE``: batches keep the grid of equal lengths (no balancing splits).
* ``KDTREE_MAIN_NO_TRIGGER``: a short request's main kernel no longer lets the combine
  launch before its epilogue (the combine launches at the main kernel's exit).

``--code-warm``: each timed replay follows the flush and one untimed replay of the same
build on a second set of inputs of the case's shape, so the call's instructions (and the
workspace) are in L2 and its own inputs are not, as in a serving loop whose layers run the
same kernels on their own data; without it the flush evicts the instructions too.

``--against NAME=DEF[+DEF...]`` (repeatable; default those three switches, one build each).
``--against-tree NAME=DIR`` (repeatable) adds a build of another source tree: an older
checkout (or its ``kernels/csrc``), built as is and launched with the ``VerifyParams`` layout
of its own ``verify_params.h``, so a change to the struct can be timed against the code before
it. Either option alone replaces the default builds.
Writes ``ab.json`` and ``ab.md`` into ``--out``, prints the table (per case, then by group:
bs 1 by split count, and batches; context below or from 16k); × = the build's time ÷ the
shipped build's (above 1: the shipped build is faster).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

from kdgate.perf_matrix import MATRICES, PerfCase
from kdgate.timing_methods import result_timing, timing_words

DEFAULT_AGAINST = ("serial-launch=KDTREE_SERIAL_LAUNCH", "no-balance=KDTREE_NO_BALANCE",
                   "no-trigger=KDTREE_MAIN_NO_TRIGGER")
SHIPPED = "shipped"
# Two builds of identical code time up to about this far apart (same-run A/B on the H200):
# a ratio inside it says nothing about which build is faster.
NOISE = 0.015
_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_DEFINE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def parse_build(spec: str) -> tuple[str, tuple[str, ...]]:
    """``NAME=DEF[+DEF...]`` -> (NAME, defines). Raises ValueError naming --against."""
    name, sep, defines = spec.partition("=")
    if not sep or not _NAME.match(name) or name == SHIPPED:
        raise ValueError(f"--against must be NAME=DEFINE[+DEFINE...] with NAME of letters, digits, "
                         f"'.', '_', '-' (not {SHIPPED!r}), got {spec!r}")
    parts = tuple(defines.split("+"))
    bad = [d for d in parts if not _DEFINE.match(d)]
    if bad:
        raise ValueError(f"--against {name}: each define must be a C identifier, got {bad}")
    return name, parts


def parse_tree_build(spec: str) -> tuple[str, Path]:
    """``NAME=DIR`` -> (NAME, the tree's CUDA source directory). Raises ValueError naming
    --against-tree."""
    from kdtree.build import source_tree

    name, sep, where = spec.partition("=")
    if not sep or not _NAME.match(name) or name == SHIPPED or not where:
        raise ValueError(f"--against-tree must be NAME=DIR with NAME of letters, digits, '.', '_', '-' "
                         f"(not {SHIPPED!r}), got {spec!r}")
    try:
        return name, source_tree(where)
    except FileNotFoundError as exc:
        raise ValueError(f"--against-tree {name}: {exc}") from None


def loop_case() -> PerfCase:
    return PerfCase(1, 1024, 8, 8, "tree")


def run(cases: list[PerfCase], builds: dict[str, tuple[str, ...]], reps: int = 30, loop_layers: int = 61,
        progress=print, code_warm: bool = False, trees: dict[str, Path] | None = None) -> dict:
    """Times every case with every build (the shipped one first); see the module docstring.
    ``builds``: name -> defines over the shipped sources; ``trees``: name -> another source
    tree (parse_tree_build()), built without defines."""
    import torch

    from kdgate.gpu_timing import L2Flush, capture, time_interleaved
    from kdgate.perf_bench import environment
    from kdgate.perf_inputs import build_perf_inputs
    from kdtree import verify_op
    from kdtree.build import build_hash

    if not torch.cuda.is_available():
        raise RuntimeError("not run: no CUDA GPU on this host (kdtree-gate ab times kernel builds on one)")
    trees = dict(trees or {})
    clash = sorted(set(builds) & set(trees))
    if clash:
        raise ValueError(f"--against and --against-tree name the same build: {clash}")
    builds = {SHIPPED: (), **builds, **{name: () for name in trees}}
    libs = {name: verify_op._library(defines, trees.get(name)) for name, defines in builds.items()}  # built first

    def call(name, inputs, out):
        args, kwargs = inputs.call_args(out)
        return lambda: verify_op.launch_build(builds[name], *args, tree=trees.get(name), **kwargs)

    flush = L2Flush("cuda")
    records = []
    for case in cases:
        inputs = build_perf_inputs(case, "cuda")
        outs = {name: inputs.new_output() for name in builds}
        calls = {name: call(name, inputs, outs[name]) for name in builds}
        graphs = {name: capture(fn) for name, fn in calls.items()}
        warm_calls, warm_graphs = {}, {}  # kept alive while their graphs replay (inputs, outputs)
        if code_warm:  # the same build on other inputs, replayed between the flush and the timed call
            other = build_perf_inputs(case, "cuda", seed=1)
            warm_calls = {name: call(name, other, other.new_output()) for name in builds}
            warm_graphs = {name: capture(fn) for name, fn in warm_calls.items()}
        median = time_interleaved(graphs, reps, flush, before={name: g.replay for name, g in warm_graphs.items()})
        for fn in calls.values():
            fn()
        torch.cuda.synchronize()
        record = {"id": case.id, **case.as_dict(), "us": median,
                  "splits": {name: verify_op.plan(case.bs, case.heads, case.n, torch.device("cuda"), libs[name])[0]
                             for name in builds},
                  "max_abs_diff": {name: float((outs[name].float() - outs[SHIPPED].float()).abs().max())
                                   for name in builds if name != SHIPPED},
                  "finite": all(bool(torch.isfinite(o.float()).all()) for o in outs.values())}
        records.append(record)
        progress(f"{case.id}: " + ", ".join(f"{n} {t:.1f} us" for n, t in median.items()))
        del inputs, outs, calls, graphs, warm_calls, warm_graphs
        torch.cuda.empty_cache()
    loop = None
    if loop_layers > 0:
        layers = [build_perf_inputs(loop_case(), "cuda", seed=k) for k in range(loop_layers)]
        keep = {name: [call(name, x, x.new_output()) for x in layers] for name in builds}
        graphs = {name: capture(lambda fns=fns: [f() for f in fns]) for name, fns in keep.items()}
        per_call = {name: t / loop_layers for name, t in time_interleaved(graphs, 20).items()}
        loop = {"id": loop_case().id, "layers": loop_layers, "per_call_us": per_call}
        progress("layer loop: " + ", ".join(f"{n} {t:.2f} us" for n, t in per_call.items()))
    return {"builds": {name: list(d) for name, d in builds.items()}, "kernel_build": build_hash(),
            "trees": {name: {"path": str(root), "kernel_build": build_hash((), root)} for name, root in trees.items()},
            "timing": "code-warm" if code_warm else "flushed",
            "environment": environment(), "cases": records, "layer_loop": loop}


LONG_CONTEXT = 16 * 1024  # positions: where issue #7's targets start


def case_group(record: dict) -> tuple:
    """The group a case's ratios are summarised in, as a sort key: batch size 1, by the
    shipped build's split count (which sets its grid: one split per SM for a request of one
    row block, fewer as row blocks are added), or a batch; and context below or from
    LONG_CONTEXT positions (the mean for mixed lengths)."""
    long = record["ctx"] >= LONG_CONTEXT
    return (0, -record["splits"][SHIPPED], long) if record["bs"] == 1 else (1, 0, long)


def group_name(key: tuple) -> str:
    batch, minus_splits, long = key
    ctx = "ctx >= 16k" if long else "ctx < 16k"
    return f"bs > 1, {ctx}" if batch else f"bs 1, {-minus_splits} splits, {ctx}"


def group_table(result: dict, others: list[str]) -> list[str]:
    """Markdown lines: per group of cases (case_group()), each build's × median and range."""
    groups: dict[tuple, list[dict]] = {}
    for r in result["cases"]:
        groups.setdefault(case_group(r), []).append(r)
    lines = ["", "By group, × median (min–max):", "",
             "| group | cases | " + " | ".join(f"{n} ×" for n in others) + " |",
             "|---|---|" + "---|" * len(others)]
    for key in sorted(groups):
        cells = []
        for n in others:
            v = sorted(r["us"][n] / r["us"][SHIPPED] for r in groups[key])
            cells.append(f"{statistics.median(v):.3f} ({v[0]:.3f}–{v[-1]:.3f})")
        lines.append(f"| {group_name(key)} | {len(groups[key])} | " + " | ".join(cells) + " |")
    return lines


def table(result: dict) -> str:
    """The A/B as Markdown: per case each build's time, its ratio to the shipped build's
    and the largest difference of its output; the ratios' median and range, overall and by
    group (group_table()); the loop."""
    others = [name for name in result["builds"] if name != SHIPPED]
    trees = result.get("trees", {})

    def build_words(n):
        if n in trees:
            return f"{n} (build {trees[n]['kernel_build']} of {trees[n]['path']})"
        return f"{n} (-D{' -D'.join(result['builds'][n])})"

    lines = [f"Shipped build {result['kernel_build']} against: " + "; ".join(build_words(n) for n in others) +
             f". × = build's time ÷ shipped build's (replays taking turns, {timing_words(result_timing(result))}).", "",
             "| case | splits (shipped) | shipped µs | " +
             " | ".join(f"{n} µs | × | max abs Δ" for n in others) + " |",
             "|---|---|---|" + "---|---|---|" * len(others)]
    ratios: dict[str, list[float]] = {n: [] for n in others}
    for r in result["cases"]:
        base = r["us"][SHIPPED]
        cells = []
        for n in others:
            ratios[n].append(r["us"][n] / base)
            cells += [f"{r['us'][n]:.1f}", f"{r['us'][n] / base:.3f}", f"{r['max_abs_diff'][n]:.1e}"]
        lines.append(f"| {r['id']} | {r['splits'][SHIPPED]} | {base:.1f} | " + " | ".join(cells) + " |")
    for n in others:
        if ratios[n]:
            v = sorted(ratios[n])
            shipped_faster = sum(x > 1 + NOISE for x in v)
            shipped_slower = sum(x < 1 - NOISE for x in v)
            lines.append(f"\n{n}: × median {statistics.median(v):.3f} (min {v[0]:.3f}, max {v[-1]:.3f}) "
                         f"over {len(v)} cases; the shipped build is faster by more than {NOISE:.1%} on "
                         f"{shipped_faster}, slower by more than {NOISE:.1%} on {shipped_slower} "
                         f"(× below 1: {n} is faster).")
    if others and result["cases"]:
        lines += group_table(result, others)
    loop = result.get("layer_loop")
    if loop:
        lines.append(f"\nLayer loop ({loop['layers']} calls in one CUDA graph, {loop['id']}), µs per call: " +
                     ", ".join(f"{n} {t:.2f}" for n, t in loop["per_call_us"].items()) + ".")
    if not all(r.get("finite", True) for r in result["cases"]):
        lines.append("\nSome output held a non-finite value: see ab.json (finite: false).")
    return "\n".join(lines)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="kdtree-gate ab", description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", action="append", default=None, metavar="NAME=DEF[+DEF...]",
                        help=f"a build to compare (repeatable; default: {', '.join(DEFAULT_AGAINST)})")
    parser.add_argument("--against-tree", action="append", default=None, metavar="NAME=DIR",
                        help="a build of another source tree (a checkout or its kernels/csrc), launched with its "
                             "own VerifyParams layout (repeatable)")
    parser.add_argument("--matrix", default="ci", choices=sorted(MATRICES), help="which cases (default ci)")
    parser.add_argument("--only", default="", help="comma-separated substrings: keep cases whose id contains one")
    parser.add_argument("--reps", type=int, default=30, help="timed replays per build and case (median)")
    parser.add_argument("--loop-layers", type=int, default=61, help="calls in the layer loop (0: no loop)")
    parser.add_argument("--out", type=Path, default=Path("reports/ab"), help="output directory")
    parser.add_argument("--code-warm", action="store_true",
                        help="before each timed replay, after the flush, replay the same build once on other "
                             "inputs of the case's shape (instructions warm, the call's inputs cold)")
    args = parser.parse_args(argv)
    if args.reps < 1:
        parser.error(f"--reps must be >= 1, got {args.reps}")
    if args.loop_layers < 0:
        parser.error(f"--loop-layers must be >= 0, got {args.loop_layers}")
    specs = args.against or ([] if args.against_tree else list(DEFAULT_AGAINST))
    tree_specs = args.against_tree or []
    try:
        builds = [parse_build(spec) for spec in specs]
        trees = [parse_tree_build(spec) for spec in tree_specs]
    except ValueError as exc:
        parser.error(str(exc))
    names = [name for name, _ in builds + trees]
    if len(set(names)) != len(names):
        parser.error("--against, --against-tree: each NAME once")
    args.builds, args.trees = dict(builds), dict(trees)
    return args


def main(argv=None) -> int:
    from kdgate.perf_bench import chosen_cases

    args = parse_args(argv)
    try:
        cases = chosen_cases(args.matrix, args.only)
        result = run(cases, args.builds, args.reps, args.loop_layers, progress=lambda line: print(line, flush=True),
                     code_warm=args.code_warm, trees=args.trees)
    except (ValueError, RuntimeError) as exc:
        print(str(exc), file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ab.json").write_text(json.dumps(result, indent=1))
    text = table(result)
    (args.out / "ab.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
