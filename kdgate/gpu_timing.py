"""GPU timing: one call replayed from a CUDA graph between L2 flushes, CUDA events, median.

A call is captured once into a CUDA graph (all of its kernels: main and combine), so
host launch cost never shows; before every timed replay a 512 MiB buffer is read so no
input is served from the 50 MB L2 (under ``code-warm`` timing, kdgate.timing_methods, an
untimed call of the same code on other inputs follows it). A read leaves only clean lines
there; a write (the flush of the baselines before build c91e610883f8) left up to 50 MB
of dirty lines that the timed call then wrote back (on the H200: 2.7-7.8 us more on the
bs-1 N1 chains of 16k-128k positions, measured side by side). Also measures the device's
two ceilings in the same process: device-to-device copy bandwidth and a large bf16
matmul's rate.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable

import torch

from kdgate.roofline import Ceilings
from kdgate.timing_methods import check_timing

FLUSH_BYTES = 512 << 20


@dataclass(frozen=True)
class Timing:
    """Microseconds per call over ``reps`` timed replays."""

    median_us: float
    p10_us: float
    p90_us: float
    reps: int
    graph: bool

    def as_dict(self) -> dict:
        return {"median_us": self.median_us, "p10_us": self.p10_us, "p90_us": self.p90_us,
                "reps": self.reps, "graph": self.graph}


class L2Flush:
    """Evicts every earlier line from L2 by reading ``FLUSH_BYTES`` (a sum into one
    preallocated scalar: no allocation, nothing dirty left behind)."""

    def __init__(self, device):
        self.buffer = torch.ones(FLUSH_BYTES // 4, dtype=torch.int32, device=device)
        self.total = torch.zeros((), dtype=torch.int64, device=device)

    def __call__(self):
        torch.sum(self.buffer, 0, dtype=torch.int64, out=self.total)


def capture(fn: Callable[[], object], warmup: int = 2) -> torch.cuda.CUDAGraph:
    """Run ``fn`` eagerly ``warmup`` times (JIT, workspaces), then capture one call."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    torch.cuda.synchronize()
    return graph


def try_capture(fn: Callable[[], object]) -> torch.cuda.CUDAGraph | None:
    """capture(fn), or None when ``fn`` cannot be captured (a baseline then runs eagerly)."""
    try:
        return capture(fn)
    except Exception:
        torch.cuda.synchronize()
        return None


def replayable(fn: Callable[[], object]) -> Callable[[], object]:
    """A CUDA graph replay of ``fn`` (its host launch cost off the device's timeline), or
    ``fn`` itself when it cannot be captured."""
    graph = try_capture(fn)
    return graph.replay if graph is not None else fn


def time_call(fn: Callable[[], object], reps: int = 30, flush: L2Flush | None = None,
              use_graph: bool = True, before: Callable[[], object] | None = None) -> Timing:
    """Median time of one call of ``fn`` (replayed from a CUDA graph unless capture fails
    or ``use_graph`` is False), each replay preceded by ``flush`` when given, then by
    ``before()``, untimed, when given (code-warm timing: ``fn``'s code on other inputs)."""
    if reps < 1:
        raise ValueError(f"reps must be >= 1, got {reps}")
    graph = try_capture(fn) if use_graph else None
    run = graph.replay if graph is not None else fn
    if graph is None:
        fn()
    times = []
    for _ in range(reps):
        if flush is not None:
            flush()
        if before is not None:
            before()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    times.sort()
    q = statistics.quantiles(times, n=10) if len(times) > 1 else [times[0]] * 9
    return Timing(statistics.median(times), q[0], q[-1], reps, graph is not None)


def time_interleaved(graphs: dict[str, torch.cuda.CUDAGraph], reps: int = 30,
                     flush: L2Flush | None = None,
                     before: dict[str, Callable[[], object]] | None = None) -> dict[str, float]:
    """Median µs of one replay of each graph, the graphs' replays taking turns (each
    preceded by ``flush`` when given, then by ``before[name]()``, untimed, when given), so
    clock and thermal drift fall on all alike: the way to compare builds of one kernel in
    one run."""
    if reps < 1:
        raise ValueError(f"reps must be >= 1, got {reps}")
    before = before or {}
    unknown = sorted(set(before) - set(graphs))
    if unknown:
        raise ValueError(f"before names no graph: {unknown}")
    times: dict[str, list[float]] = {name: [] for name in graphs}
    for _ in range(reps):
        for name, graph in graphs.items():
            if flush is not None:
                flush()
            if name in before:
                before[name]()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            times[name].append(start.elapsed_time(end) * 1e3)
    return {name: statistics.median(t) for name, t in times.items()}


def time_rotation(fns: list[Callable[[], object]], reps: int = 20) -> Timing:
    """Per-call timing when all of ``fns`` run back to back inside one CUDA graph (no flush:
    the serving loop of many layers, each on its own inputs): each replay's time ÷ len(fns)."""
    if not fns:
        raise ValueError("fns must hold at least one call, got none")

    def all_calls():
        for fn in fns:
            fn()
    t = time_call(all_calls, reps=reps, flush=None)
    k = len(fns)
    return Timing(t.median_us / k, t.p10_us / k, t.p90_us / k, t.reps, t.graph)


def time_sequence(fns: list[Callable[[], object]], reps: int = 20) -> float:
    """Microseconds per call (median) of time_rotation()."""
    return time_rotation(fns, reps).median_us


def measure_ceilings(device="cuda") -> Ceilings:
    """Copy bandwidth (2 GiB device-to-device copy, bytes read + written) and the bf16
    matmul rate (8192^3), medians of 10."""
    a = torch.empty(1 << 30, dtype=torch.bfloat16, device=device)
    b = torch.empty_like(a)
    copy = time_call(lambda: b.copy_(a), reps=10, use_graph=False)
    copy_gbps = 2 * a.numel() * a.element_size() / (copy.median_us * 1e-6) / 1e9
    del a, b
    x = torch.randn(8192, 8192, dtype=torch.bfloat16, device=device)
    y = torch.randn_like(x)
    mm = time_call(lambda: x @ y, reps=10, use_graph=False)
    tflops = 2 * 8192 ** 3 / (mm.median_us * 1e-6) / 1e12
    del x, y
    torch.cuda.empty_cache()
    return Ceilings(copy_gbps=copy_gbps, matmul_tflops=tflops)


def launch_floor(flush: L2Flush, reps: int = 30, device="cuda", timing: str = "flushed") -> dict:
    """What this timing charges a call that does no work: medians (µs) of a call of one and
    of two one-element kernels, timed like a call (graph replay after ``flush``; under
    ``code-warm`` timing, then the same kernels on another element; under ``rotated``, per
    call of a 61-call loop), and the per-call time of a 61-call loop of two such kernels
    (timed like the layer loop). Part of every measured call time; no kernel design removes it."""
    check_timing(timing)
    x = torch.zeros(1, device=device)
    y = torch.zeros(1, device=device)
    loop = time_sequence([lambda: (x.add_(1), x.add_(1))] * 61, reps=reps)
    if timing == "rotated":
        one = time_sequence([lambda: x.add_(1)] * 61, reps=reps)
        return {"one_kernel_us": one, "two_kernels_us": loop, "loop_two_kernels_us": loop}
    warm = timing == "code-warm"
    one = time_call(lambda: x.add_(1), reps=reps, flush=flush,
                    before=replayable(lambda: y.add_(1)) if warm else None).median_us
    two = time_call(lambda: (x.add_(1), x.add_(1)), reps=reps, flush=flush,
                    before=replayable(lambda: (y.add_(1), y.add_(1))) if warm else None).median_us
    return {"one_kernel_us": one, "two_kernels_us": two, "loop_two_kernels_us": loop}
