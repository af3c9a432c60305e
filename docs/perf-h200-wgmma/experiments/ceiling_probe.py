"""Ceiling stability probe (session 18): kdgate.gpu_timing.measure_ceilings() four times in a row,
three more after 2 s of sustained 8192^3 bf16 matmuls, then a plain loop of 10 matmuls with
randn and with zero operands. Run on the GPU host from the repository root:

    PYTHONPATH=$PWD:$PWD/kernels python docs/perf-h200-wgmma/experiments/ceiling_probe.py

Measured on the H200 (2026-11-30): copy 3829-4215 GB/s and matmul 678-780 TFLOP/s across the
seven calls (each a median of 10); the plain loop 792 TFLOP/s (randn) and 840 (zeros).
"""
import time

import torch

from kdgate.gpu_timing import measure_ceilings

for i in range(4):
    c = measure_ceilings()
    print(f"cold-ish {i}: copy {c.copy_gbps:.0f} GB/s, matmul {c.matmul_tflops:.0f} TFLOP/s", flush=True)
x = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
t0 = time.time()
while time.time() - t0 < 2.0:
    for _ in range(20):
        x @ x
    torch.cuda.synchronize()
for i in range(3):
    c = measure_ceilings()
    print(f"after 2 s of matmuls {i}: copy {c.copy_gbps:.0f} GB/s, matmul {c.matmul_tflops:.0f} TFLOP/s", flush=True)
z = torch.zeros(8192, 8192, dtype=torch.bfloat16, device="cuda")
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
for name, a in (("randn", x), ("zeros", z)):
    for _ in range(5):
        a @ a
    s.record()
    for _ in range(10):
        a @ a
    e.record(); e.synchronize()
    print(f"{name} operands: {2 * 8192 ** 3 * 10 / (s.elapsed_time(e) * 1e-3) / 1e12:.0f} TFLOP/s")
