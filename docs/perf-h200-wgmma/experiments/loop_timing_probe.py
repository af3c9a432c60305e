"""Loop-timing probe (Session 39): target 1's cases (ctx >= 16k, N·H <= 64) timed the
issue's other permitted way, back to back with inputs rotated (one CUDA graph of LAYERS calls,
each on its own inputs, no flush; kdgate.gpu_timing.time_sequence, as the bench's layer loop;
fewer calls for the largest cases, whose inputs would not fit 16 times).
Fractions are of this run's copy ceiling (measure_ceilings, best of 4); stream_probe.cu's loop
table gives what a kernel that only reads the same bytes takes, timed the same way. Run on the GPU host from the repository root:

    PYTHONPATH=$PWD:$PWD/kernels python docs/perf-h200-wgmma/experiments/loop_timing_probe.py
"""
import torch

from kdgate.gpu_timing import measure_ceilings
from kdgate.perf_bench import layer_loop
from kdgate.perf_inputs import request_lengths
from kdgate.perf_matrix import matrix
from kdgate.roofline import best_of, call_bytes

LAYERS = 16  # 16 x 18.9 MB already exceeds the 50 MB L2
INPUT_BUDGET = 20e9  # bytes of KV the calls of one graph may hold together

copy_gbps = best_of([measure_ceilings() for _ in range(4)]).copy_gbps
cases = [c for c in matrix("full") if c.ctx >= 16384 and c.n * c.heads <= 64]
print(f"copy ceiling {copy_gbps:.0f} GB/s")
print("| case | MB | calls per graph | µs per call | of copy |")
print("|---|---|---|---|---|")
for case in cases:
    layers = int(max(2, min(LAYERS, INPUT_BUDGET // case.kv_bytes())))
    # bytes per call, the mean over the calls (a mixed batch's lengths differ by seed)
    nbytes = sum(call_bytes(request_lengths(case, seed=layer), case.n) for layer in range(layers)) / layers
    kernel_us = layer_loop(case, layers)["per_call_us"]  # the bench's layer-loop recipe
    frac = nbytes / (kernel_us * 1e-6) / 1e9 / copy_gbps
    print(f"| {case.id} | {nbytes / 1e6:.1f} | {layers} | {kernel_us:.1f} | {frac:.2f} |", flush=True)
    torch.cuda.empty_cache()
