"""The kernel benchmark: ``kdtree-gate bench`` (or ``python -m kdgate.perf_bench``).

In one process on one GPU: measures the copy-bandwidth and matmul ceilings (several times,
spread over the run; the figures use the best of each), then for every case of the chosen
matrix times the kdtree kernel (whole call, its main kernel alone and its combine alone),
SGLang's ``extend_attention_fwd`` (every case) and ``verify_shared_kv_fwd`` (chains) on
identical inputs, and checks the kernel's output against Triton's on the same inputs (a
benchmark of a wrong kernel is worthless). Writes ``bench.json`` (schema below),
``bench.md`` (the table) and ``bench.png`` (time and fraction of roofline vs context) into
``--out``, and prints the table last. ``--paths tiled,wgmma`` also times each named kernel
path (``KDTREE_KERNEL_PATH``) on the same inputs in the same run and checks its output
against the default path's. ``--baseline FILE`` compares each case's fraction of roofline
with a committed baseline (exit 1 on a drop > tolerance, 2 when it cannot be compared:
another GPU model or timing method, or not a benchmark result).

``--timing`` (kdgate.timing_methods) says how a call is timed: after the read flush alone
(``flushed``, the default); after the flush then one call of the same code on a second
input set (``code-warm``: instructions warm, the call's inputs cold); or back to back with
calls on rotation_sets() input sets of the case's shape (rotation_calls() calls per replay)
in one CUDA graph, no flush (``rotated``: a serving loop's view, per call). Under both of
the latter each whole call is also timed flushed (``kernel_flushed``).

``bench.json``: {"schema": 1, "timing", "matrix", "environment", "ceilings": {copy_gbps,
matmul_tflops} (the best of "ceiling_samples": [{after_cases, copy_gbps, matmul_tflops}],
``--ceiling-samples`` of them spread over the run), "cases": [{id, case fields,
lengths_sum, lengths_min, lengths_max, splits, kernel {median_us, ...}, kernel_flushed
{median_us, ...} (code-warm and rotated runs only: the same call timed flushed), main_us,
combine_us, combine_share, combine_in_call_share, figures {gbps, tflops,
roofline_fraction, ...}, extend_us, verify_shared_us, speedup_extend,
speedup_verify_shared, max_abs_diff, path, rel_l2_vs_triton, paths: {NAME: {median_us,
path, speedup, roofline_fraction, max_abs_diff} or {error}}}], "launch_floor":
{one_kernel_us, two_kernels_us, loop_two_kernels_us} (gpu_timing.launch_floor),
"layer_loop": {...}}.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from pathlib import Path

from kdgate.perf_matrix import MATRICES, PerfCase, matrix
from kdgate.timing_methods import DEFAULT_TIMING, TIMINGS, check_timing, result_timing, timing_words

SCHEMA = 1
MIN_BASELINE_REPS, MAX_BASELINE_REPS = 3, 20
ROTATION_BYTES = 256 << 20  # KV a rotated case's input sets hold together: five times the H200's 50 MiB L2
MAX_ROTATION_SETS = 256
MIN_ROTATION_CALLS = 16  # calls per graph replay: a replay's own launch weighs 1/16 of a call or less


def rotation_sets(kv_bytes: int) -> int:
    """Input sets a case cycles through under ``rotated`` timing: enough that they hold
    ROTATION_BYTES of KV (``kv_bytes`` per set), so no call finds its inputs in L2; at least
    2, at most MAX_ROTATION_SETS."""
    if kv_bytes <= 0:
        raise ValueError(f"kv_bytes must be positive, got {kv_bytes}")
    return int(min(MAX_ROTATION_SETS, max(2, -(-ROTATION_BYTES // kv_bytes))))


def rotation_calls(sets: int) -> int:
    """Calls one replay of a rotated case makes over its ``sets`` input sets, each set in
    turn: the sets repeated until there are at least MIN_ROTATION_CALLS (a whole number of
    rounds, so every set is called equally often)."""
    if sets < 1:
        raise ValueError(f"sets must be >= 1, got {sets}")
    return sets * -(-MIN_ROTATION_CALLS // sets)


def environment() -> dict:
    """The host's environment (as the nightly report states it) plus the GPU's SM count
    and capability, Triton's version and the time of the run."""
    import torch

    from kdgate.nightly_report import _version, host_environment

    env = {**host_environment(), "triton": _version("triton"),
           "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        env.update(sms=props.multi_processor_count, capability=f"{props.major}.{props.minor}")
    return env


def _baseline_reps(fn, budget_s: float) -> int:
    """Replays a slow baseline gets: as many as fit ``budget_s``, within [3, 20]."""
    import torch

    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    once = time.perf_counter() - start
    return int(max(MIN_BASELINE_REPS, min(MAX_BASELINE_REPS, budget_s / max(once, 1e-6))))


@contextlib.contextmanager
def kernel_path(name: str):
    """``KDTREE_KERNEL_PATH`` set to ``name`` inside the block, restored after."""
    before = os.environ.get("KDTREE_KERNEL_PATH")
    os.environ["KDTREE_KERNEL_PATH"] = name
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("KDTREE_KERNEL_PATH", None)
        else:
            os.environ["KDTREE_KERNEL_PATH"] = before


def bench_paths(paths, args, kwargs, out, kernel_out, main_us, timed) -> dict:
    """Each named kernel path timed on the case's inputs (``timed``: bench_case's timer),
    its output compared with the default path's (``kernel_out``); a path this device
    cannot run gets {"error": ...}. Fractions of roofline are added by ``figure_case``."""
    import torch

    from kdtree.verify_op import launch_part, tree_verify_fwd

    found = {}
    for name in paths:
        with kernel_path(name):
            try:
                _, plan_name = launch_part("main", *args, **kwargs)
            except RuntimeError as exc:
                found[name] = {"error": str(exc)}
                continue
            t = timed(lambda a, k: lambda: tree_verify_fwd(*a, **k))
            out.fill_(float("nan"))
            tree_verify_fwd(*args, **kwargs)
            torch.cuda.synchronize()
            diff = (out.float() - kernel_out).abs()
            found[name] = {"median_us": t.median_us, "path": plan_name, "speedup": main_us / t.median_us,
                           "max_abs_diff": float(diff.max()) if torch.isfinite(diff).all() else float("nan")}
    return found


def figure_case(record: dict, lengths: list[int], ceilings) -> None:
    """(Re)writes a case record's ``figures`` and each timed path's ``roofline_fraction``
    against ``ceilings`` (the run's best ceilings once the run is done)."""
    from kdgate import roofline

    record["figures"] = roofline.figures(lengths, record["n"], record["heads"], record["kernel"]["median_us"],
                                         ceilings)
    for got in record.get("paths", {}).values():
        if "median_us" in got:
            got["roofline_fraction"] = roofline.figures(lengths, record["n"], record["heads"], got["median_us"],
                                                        ceilings)["roofline_fraction"]


def bench_case(case: PerfCase, ceilings, flush, reps: int = 30, baseline_budget_s: float = 1.0,
               baselines: bool = True, paths: tuple[str, ...] = (),
               timing: str = DEFAULT_TIMING) -> tuple[dict, list[int]]:
    """Times one case under ``timing`` (kdgate.timing_methods); returns its record (see the
    module docstring for the fields; figures against ``ceilings``) and the request lengths
    it ran. Under ``code-warm`` every timed replay (the kernel's call, main and combine
    alone, each path, each SGLang baseline) follows the same launch on a second input set
    of the case's shape (seed 1); under ``rotated`` each timed thing runs back to back over
    rotation_sets() input sets of the case's lengths (seeds 0, 1, ...), rotation_calls() calls
    per replay. Under either the whole call is also timed flushed (``kernel_flushed``)."""
    import torch

    from kdgate import baselines as sglang_kernels
    from kdgate.gpu_timing import replayable, time_call, time_rotation
    from kdgate.perf_inputs import build_perf_inputs
    from kdtree.verify_op import launch_part, tree_verify_fwd

    check_timing(timing)
    inputs = build_perf_inputs(case, "cuda")
    lengths = list(inputs.case.ctx)
    out = inputs.new_output()
    args, kwargs = inputs.call_args(out)
    other = build_perf_inputs(case, "cuda", seed=1) if timing == "code-warm" else None
    other_call = other.call_args(other.new_output()) if other is not None else None
    # rotated: further input sets of the same lengths (seeds 1, 2, ...), each with its output
    rotation = [inputs] + ([build_perf_inputs(case, "cuda", seed=s, lengths_seed=0)
                            for s in range(1, rotation_sets(case.kv_bytes()))] if timing == "rotated" else [])
    kernel_sets = [(args, kwargs)] + [r.call_args(r.new_output()) for r in rotation[1:]]

    def timed(make, own=None, n=reps):
        """``make(args, kwargs)`` -> a call; times it under this run's method on ``own``, a
        list of (args, kwargs) (default: the kernel's; under rotated timing one per input
        set, the first the case's own inputs and output), ``n`` replays."""
        own = kernel_sets if own is None else own
        if timing == "rotated":
            calls = [make(*o) for o in own]
            return time_rotation(calls * (rotation_calls(len(calls)) // len(calls)), reps=n)
        before = replayable(make(*other_call)) if other_call is not None else None
        return time_call(make(*own[0]), reps=n, flush=flush, before=before)

    def baseline_replays(fn, sets) -> int:
        """Replays a slow baseline gets within the budget: _baseline_reps() single calls, as
        whole rotations under rotated timing (at least MIN_BASELINE_REPS)."""
        n = _baseline_reps(fn, baseline_budget_s)
        return max(MIN_BASELINE_REPS, n // rotation_calls(len(sets))) if timing == "rotated" else n

    record = {"id": case.id, **case.as_dict(), "lengths_sum": sum(lengths),
              "lengths_min": min(lengths), "lengths_max": max(lengths)}

    whole = lambda a, k: lambda: tree_verify_fwd(*a, **k)  # noqa: E731
    kernel = timed(whole)
    if timing != "flushed":
        record["kernel_flushed"] = time_call(whole(args, kwargs), reps=reps, flush=flush).as_dict()
    splits, path = launch_part("main", *args, **kwargs)
    record["splits"] = splits
    record["path"] = path
    record["kernel"] = kernel.as_dict()
    if splits > 1:
        main_only = timed(lambda a, k: lambda: launch_part("main", *a, **k))
        combine = timed(lambda a, k: lambda: launch_part("combine", *a, **k))
        record["main_us"], record["combine_us"] = main_only.median_us, combine.median_us
    else:
        record["main_us"], record["combine_us"] = kernel.median_us, 0.0
    # the combine replayed alone (its own launch: flushed, its partials read from DRAM;
    # code-warm, after the combine of the other inputs, whose partials share the workspace)
    # and what it adds inside a call (whole call - main alone; partials still in L2): each
    # / whole call
    record["combine_share"] = min(record["combine_us"] / kernel.median_us, 1.0)
    record["combine_in_call_share"] = min(max(kernel.median_us - record["main_us"], 0.0) / kernel.median_us, 1.0)
    tree_verify_fwd(*args, **kwargs)
    torch.cuda.synchronize()
    kernel_out = out.float()
    record["kernel_output_finite"] = bool(torch.isfinite(kernel_out).all())
    if paths:
        record["paths"] = bench_paths(paths, args, kwargs, out, kernel_out, kernel.median_us, timed)
    figure_case(record, lengths, ceilings)

    record.update(extend_us=None, verify_shared_us=None, speedup_extend=None,
                  speedup_verify_shared=None, max_abs_diff=None, rel_l2_vs_triton=None)
    if baselines:
        ref_out = inputs.new_output()
        ref_call = inputs.call_args(ref_out)
        ref_sets = [ref_call] + [r.call_args(r.new_output()) for r in rotation[1:]]
        extend = lambda a, k: lambda: sglang_kernels.triton_extend_attention(*a, **k)  # noqa: E731
        t = timed(extend, ref_sets, baseline_replays(extend(*ref_call), ref_sets))
        record["extend_us"] = t.median_us
        record["speedup_extend"] = t.median_us / kernel.median_us
        extend(*ref_call)()
        torch.cuda.synchronize()
        diff = (kernel_out - ref_out.float())
        record["max_abs_diff"] = float(diff.abs().max())
        record["rel_l2_vs_triton"] = float(diff.norm() / ref_out.float().norm().clamp_min(1e-30))
        if case.shape == "chain":
            shared = lambda a, k: lambda: sglang_kernels.triton_verify_shared_kv(*a, **k)  # noqa: E731
            if shared(*ref_call)():
                t = timed(shared, ref_sets, baseline_replays(shared(*ref_call), ref_sets))
                record["verify_shared_us"] = t.median_us
                record["speedup_verify_shared"] = t.median_us / kernel.median_us
    del inputs, out, args, kwargs
    other = other_call = None  # noqa: F841 (frees the second input set before the next case)
    rotation = kernel_sets = ref_sets = None  # noqa: F841 (and the rotated ones)
    torch.cuda.empty_cache()
    return record, lengths


def layer_loop(case: PerfCase, layers: int = 61) -> dict:
    """Per-call time of ``layers`` calls replayed in one CUDA graph, each on its own
    inputs (a model's layer loop; no flush, as in serving)."""
    from kdgate.gpu_timing import time_sequence
    from kdgate.perf_inputs import build_perf_inputs
    from kdtree.verify_op import tree_verify_fwd

    calls = []
    for layer in range(layers):
        inputs = build_perf_inputs(case, "cuda", seed=layer)
        args, kwargs = inputs.call_args(inputs.new_output())
        calls.append(lambda a=args, k=kwargs: tree_verify_fwd(*a, **k))
    return {"id": case.id, **case.as_dict(), "layers": layers, "per_call_us": time_sequence(calls)}


CEILING_SAMPLES = 8


def ceiling_sample_points(n_cases: int, samples: int = CEILING_SAMPLES) -> list[int]:
    """After how many finished cases the run measures its ceilings: 0 (before the first
    case), ``n_cases`` (after the last) and the rest spread evenly between, so the run's
    ceilings are the best of the same number of samples whatever its length (fewer when
    there are fewer cases than samples)."""
    if samples < 2:
        raise ValueError(f"samples must be >= 2 (one before the cases, one after), got {samples}")
    if n_cases < 0:
        raise ValueError(f"n_cases must be >= 0, got {n_cases}")
    return sorted({round(k * n_cases / (samples - 1)) for k in range(samples)})


def run(cases: list[PerfCase], reps: int = 30, baseline_budget_s: float = 1.0,
        baselines: bool = True, progress=print, with_layer_loop: bool = True,
        paths: tuple[str, ...] = (), ceiling_samples: int = CEILING_SAMPLES,
        timing: str = DEFAULT_TIMING) -> dict:
    """Benchmarks ``cases``, each call timed by method ``timing`` (kdgate.timing_methods);
    the ceilings are measured ``ceiling_samples`` times spread over the run
    (ceiling_sample_points) and every case's figures use the best of them."""
    import torch

    from kdgate.gpu_timing import L2Flush, launch_floor, measure_ceilings
    from kdgate.roofline import Ceilings, best_of

    check_timing(timing)
    if not torch.cuda.is_available():
        raise RuntimeError("not run: no CUDA GPU on this host (torch.cuda.is_available() is False)")
    env = environment()
    points = ceiling_sample_points(len(cases), ceiling_samples)
    samples: list[tuple[int, Ceilings]] = []  # (cases done, ceilings measured then)

    def sample_ceilings(done: int):
        got = measure_ceilings()
        samples.append((done, got))
        progress(f"ceilings after {done} cases: copy {got.copy_gbps:.0f} GB/s, bf16 matmul "
                 f"{got.matmul_tflops:.0f} TFLOP/s")

    def best():
        return best_of(got for _, got in samples)

    sample_ceilings(0)
    flush = L2Flush("cuda")
    floor = launch_floor(flush, timing=timing)
    progress(f"launch floor: one 1-element kernel {floor['one_kernel_us']:.1f} us, two "
             f"{floor['two_kernels_us']:.1f} us per call; "
             f"{floor['loop_two_kernels_us']:.2f} us per call in a 61-call loop")
    records = []
    for i, case in enumerate(cases, 1):
        started = time.perf_counter()
        rec, lengths = bench_case(case, best(), flush, reps, baseline_budget_s, baselines, paths, timing)
        records.append((rec, lengths))
        progress(f"[{i}/{len(cases)}] {case.id}: {rec['kernel']['median_us']:.1f} us, "
                 f"{rec['figures']['roofline_fraction']:.2f} of roofline (ceilings so far)"
                 + (f", {rec['speedup_extend']:.0f}x extend" if rec["speedup_extend"] else "")
                 + f" ({time.perf_counter() - started:.1f}s)")
        if i in points:
            sample_ceilings(i)
    ceilings = best()
    for rec, lengths in records:
        figure_case(rec, lengths, ceilings)
    progress(f"the run's ceilings, best of {len(samples)} samples: copy {ceilings.copy_gbps:.0f} GB/s, "
             f"bf16 matmul {ceilings.matmul_tflops:.0f} TFLOP/s")
    loop = None
    if with_layer_loop:
        loop = layer_loop(PerfCase(1, 1024, 8, 8, "tree"))
        progress(f"layer loop {loop['id']}: {loop['per_call_us']:.2f} us per call in a CUDA graph")
    return {"schema": SCHEMA, "timing": timing, "environment": env, "ceilings": ceilings.as_dict(),
            "ceiling_samples": [{"after_cases": done, **got.as_dict()} for done, got in samples],
            "cases": [rec for rec, _ in records], "launch_floor": floor, "layer_loop": loop}


def _fmt(value, spec):
    return "-" if value is None else format(value, spec)


def table(result: dict) -> str:
    """The summary as a Markdown table (one row per case)."""
    flushed_too = has_flushed_times(result)
    lines = [f"{ceiling_line(result)} Kernel build {result['environment'].get('kernel_build')}. "
             f"{timing_line(result)}",
             "",
             "| case | bound | kernel µs | " + ("flushed µs | " if flushed_too else "") +
             "floor µs | roofline | GB/s (of copy) | TFLOP/s (of mm) "
             "| combine alone (in call) | splits | extend µs | × extend | verify_shared µs | × shared "
             "| rel L2 vs Triton | path |",
             "|---|---|---|" + ("---|" if flushed_too else "") + "---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["cases"]:
        f = r["figures"]
        flushed = (f"{_fmt((r.get('kernel_flushed') or {}).get('median_us'), '.1f')} | " if flushed_too else "")
        lines.append(
            f"| {r['id']} | {f['bound']} | {r['kernel']['median_us']:.1f} | {flushed}{f['floor_us']:.1f} | "
            f"{f['roofline_fraction']:.2f} | {f['gbps']:.0f} ({f['bandwidth_fraction']:.2f}) | "
            f"{f['tflops']:.0f} ({f['matmul_fraction']:.2f}) | "
            f"{r['combine_share']:.2f} ({_fmt(r.get('combine_in_call_share'), '.2f')}) | {r['splits']} | "
            f"{_fmt(r['extend_us'], '.1f')} | {_fmt(r['speedup_extend'], '.1f')} | "
            f"{_fmt(r['verify_shared_us'], '.1f')} | {_fmt(r['speedup_verify_shared'], '.2f')} | "
            f"{_fmt(r['rel_l2_vs_triton'], '.1e')} | {r.get('path', '-')} |")
    named = sorted({name for r in result["cases"] for name in r.get("paths", {})})
    if named:
        lines += ["", "Kernel paths on the same inputs in this run (× = default path's time ÷ this "
                      "path's; max |Δ| against the default path's output):", "",
                  "| case | default µs (path) | " + " | ".join(f"{n} µs (path) | × | roofline | max abs Δ"
                                                          for n in named) + " |",
                  "|---|---|" + "---|---|---|---|" * len(named)]
        for r in result["cases"]:
            cells = [f"{r['kernel']['median_us']:.1f} ({r.get('path', '-')})"]
            for n in named:
                got = r.get("paths", {}).get(n)
                if got is None:
                    cells += ["-"] * 4
                elif "error" in got:
                    cells += [f"not run: {got['error'][:60]}", "-", "-", "-"]
                else:
                    cells += [f"{got['median_us']:.1f} ({got['path']})", f"{got['speedup']:.2f}",
                              f"{got['roofline_fraction']:.2f}", f"{got['max_abs_diff']:.1e}"]
            lines.append(f"| {r['id']} | " + " | ".join(cells) + " |")
    for line in context_lines(result):
        lines += ["", line]
    from kdgate.perf_limits import describe as limits_table
    from kdgate.perf_targets import describe

    lines += ["", describe(result)]
    if (result.get("environment") or {}).get("sms"):  # runs from before the SM count was recorded lack it
        lines += ["", limits_table(result)]
    return "\n".join(lines)


def has_flushed_times(result: dict) -> bool:
    """Whether the run also timed its calls flushed (a code-warm or rotated run's ``kernel_flushed``)."""
    return any("kernel_flushed" in r for r in result.get("cases", []))


def timing_line(result: dict) -> str:
    """One sentence: how each call was timed (kdgate.timing_methods), and what the
    flushed column is when the run has one."""
    timing = result_timing(result)
    if timing == "rotated":
        line = (f"Each call timed {timing_words(timing)} (a replay's time ÷ its calls, {MIN_ROTATION_CALLS} or more; "
                f"input sets holding {ROTATION_BYTES >> 20} MiB of KV or more; timing {timing})")
    else:
        line = f"Each call timed as one CUDA graph replay {timing_words(timing)} (timing {timing})"
    if has_flushed_times(result):
        line += "; flushed µs: the same call timed after the read flush alone, its instructions read from DRAM"
    return line + "."


def ceiling_line(result: dict) -> str:
    """One sentence: the ceilings the run's figures use and, when the run sampled them
    more than once, how many samples and their spread."""
    c = result["ceilings"]
    line = (f"Ceilings measured in this run: copy {c['copy_gbps']:.0f} GB/s, bf16 matmul "
            f"{c['matmul_tflops']:.0f} TFLOP/s")
    samples = result.get("ceiling_samples") or []
    if len(samples) > 1:
        copy = [s["copy_gbps"] for s in samples]
        mm = [s["matmul_tflops"] for s in samples]
        line += (f" (the best of {len(samples)} samples spread over the run: copy {min(copy):.0f}–"
                 f"{max(copy):.0f} GB/s, matmul {min(mm):.0f}–{max(mm):.0f} TFLOP/s)")
    return line + "."


def context_lines(result: dict) -> list[str]:
    """The run's launch floor (part of every measured call; no kernel removes it) and its
    layer loop, one sentence each (none for what the result does not hold)."""
    lines = []
    floor = result.get("launch_floor")
    if floor:
        lines.append("Launch floor, timed like a call: one 1-element kernel "
                     f"{floor['one_kernel_us']:.1f} µs, two {floor['two_kernels_us']:.1f} µs; "
                     f"two per call in a 61-call loop {floor['loop_two_kernels_us']:.2f} µs per call.")
    loop = result.get("layer_loop")
    if loop:
        lines.append(f"Layer loop ({loop['layers']} calls in one CUDA graph, {loop['id']}): "
                     f"{loop['per_call_us']:.2f} µs per call.")
    return lines


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="kdtree-gate bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--matrix", default="full", choices=sorted(MATRICES),
                        help="which cases (default full: issue #7's matrix)")
    parser.add_argument("--only", default="", help="comma-separated substrings: keep cases whose id contains one")
    parser.add_argument("--out", type=Path, default=Path("reports/bench"), help="output directory")
    parser.add_argument("--reps", type=int, default=30, help="timed replays per kernel case (median)")
    parser.add_argument("--ceiling-samples", type=int, default=CEILING_SAMPLES,
                        help="times the copy and matmul ceilings are measured, spread over the run; "
                             f"the figures use the best (default {CEILING_SAMPLES}, at least 2)")
    parser.add_argument("--baseline-budget-s", type=float, default=1.0,
                        help="seconds of timed replays allowed per SGLang baseline and case")
    parser.add_argument("--no-baselines", action="store_true", help="time the kdtree kernel only")
    parser.add_argument("--paths", default="",
                        help="comma-separated kernel paths (KDTREE_KERNEL_PATH values) also timed per case")
    parser.add_argument("--timing", default=DEFAULT_TIMING, choices=sorted(TIMINGS),
                        help="what precedes each timed replay: " +
                             "; ".join(f"{k}: {v}" for k, v in TIMINGS.items()) +
                             f" (default {DEFAULT_TIMING}; code-warm and rotated also time each whole call flushed)")
    parser.add_argument("--baseline", type=Path, help="compare with this committed perf baseline JSON")
    parser.add_argument("--tolerance", type=float, default=0.10,
                        help="allowed relative drop of a case's fraction of roofline (default 0.10)")
    parser.add_argument("--write-baseline", type=Path,
                        help="also save this run as a new baseline (refuses to replace an existing file)")
    args = parser.parse_args(argv)
    if args.reps < 1:
        parser.error(f"--reps must be >= 1, got {args.reps}")
    if args.ceiling_samples < 2:
        parser.error(f"--ceiling-samples must be >= 2 (one before the cases, one after), got {args.ceiling_samples}")
    if not 0 <= args.tolerance < 1:
        parser.error(f"--tolerance must be in [0, 1), got {args.tolerance}")
    if args.baseline_budget_s <= 0:
        parser.error(f"--baseline-budget-s must be positive, got {args.baseline_budget_s}")
    from kdtree.verify_op import PATHS

    args.paths = tuple(p for p in args.paths.split(",") if p)
    unknown = [p for p in args.paths if p not in PATHS]
    if unknown:
        parser.error(f"--paths: unknown kernel path(s) {unknown}; known: {sorted(PATHS)}")
    if args.baseline is not None and not args.baseline.is_file():
        parser.error(f"--baseline: no such file {args.baseline}")
    if args.write_baseline is not None and args.write_baseline.exists():
        parser.error(f"--write-baseline: {args.write_baseline} exists; baselines are never replaced "
                     "silently: remove it first or write to a new path")
    return args


def select(cases: list[PerfCase], only: str) -> list[PerfCase]:
    keys = [k for k in only.split(",") if k]
    return [c for c in cases if not keys or any(k in c.id for k in keys)]


def chosen_cases(matrix_name: str, only: str) -> list[PerfCase]:
    """The cases of ``matrix_name`` that ``--only`` keeps; ValueError naming both when none."""
    cases = select(matrix(matrix_name), only)
    if not cases:
        raise ValueError(f"no case of matrix {matrix_name!r} matches --only {only!r}")
    return cases


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        cases = chosen_cases(args.matrix, args.only)
    except ValueError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    try:
        result = run(cases, args.reps, args.baseline_budget_s, not args.no_baselines,
                     progress=lambda line: print(line, flush=True), paths=args.paths,
                     ceiling_samples=args.ceiling_samples, timing=args.timing)
    except RuntimeError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    result["matrix"] = args.matrix
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench.json").write_text(json.dumps(result, indent=1))
    from kdgate.perf_plot import plot_bench

    plot_bench(result, args.out / "bench.png")
    text = table(result)
    status = 0
    if args.baseline is not None:
        from kdgate.perf_baseline import compare, load_baseline

        try:
            verdict = compare(result, load_baseline(args.baseline), args.tolerance)
        except ValueError as exc:  # not a baseline, or another GPU model: said, not compared
            text += f"\n\nNot compared with --baseline {args.baseline}: {exc}"
            status = 2
        else:
            text += "\n\n" + verdict.describe()
            status = 0 if verdict.ok else 1
    if args.write_baseline is not None:
        from kdgate.perf_baseline import write_baseline

        write_baseline(args.write_baseline, result)
        text += f"\n\nBaseline written to {args.write_baseline}."
    (args.out / "bench.md").write_text(text + "\n")
    print(text)
    return status


if __name__ == "__main__":
    sys.exit(main())
