"""A reduced kernel matrix for compute-sanitizer (memcheck, racecheck): every code path
(split and unsplit, both partial formats, every combine group size and batch count, ctx 0, mixed batches, chain
without mask, LSE, padded requests, debug checks) once, each checked by the parity rule.
Exit status 0 only if all pass. Every split case here takes the combine's 4-CTAs-per-SM
build; its 8-per-SM build (the same source, other registers) needs a grid past one wave of
4 per SM and is held to the parity rule by suites/kernel/test_split_combine.py instead.
Each case prints the parity rule's figures (max, p99.9 and mean signed error in ULP).

    compute-sanitizer --tool memcheck --error-exitcode 1 python -m kdgate.sanitize_run
    compute-sanitizer --tool racecheck --error-exitcode 1 python -m kdgate.sanitize_run --quick

``--quick`` leaves out the 128-head case (racecheck is slow); ``--kernel SPEC`` picks the
candidate (default: the shipped kernel).
"""

from __future__ import annotations

import sys

import torch

from kdgate.candidates import resolve
from kdgate.kernel_run import run_case
from kdgate.verify_inputs import VerifyCase, build_inputs

CASES = (
    VerifyCase(ctx=(0,), n=4, heads=8, seed=90),
    VerifyCase(ctx=(1, 65, 300), n=8, heads=16, seed=91, indptr_dtype="int64", mask_dtype="uint8"),
    VerifyCase(ctx=(5000,), n=16, heads=8, tree="chain", mask_dtype="none", seed=92),
    VerifyCase(ctx=(200,) * 40, n=4, heads=8, seed=93),      # one split per request
    VerifyCase(ctx=(3000,), n=33, heads=128, tree="topk", seed=94),
    VerifyCase(ctx=(700,), n=2, heads=8, seed=95),            # 16 rows: the wgmma path's 16-row blocks
    VerifyCase(ctx=(9000,), n=4, heads=8, seed=98),           # 32 rows: the wgmma path's 32-row blocks, split
    VerifyCase(ctx=(3000,), n=64, heads=8, seed=96),          # 8 row blocks: 16 splits, 2 combine warps per chunk
    VerifyCase(ctx=(16800,), n=8, heads=8, seed=97),          # one split per SM (132 on the H200), each with KV;
                                                              # fp16 partial states (split_plan.h)
    VerifyCase(ctx=(2000,), n=8, heads=8, seed=99),           # 64 rows, short: 4 blocks of 16 x 33 splits
                                                              # positions: the combine's third batch of loads;
                                                              # the fp16 build's fp32 values (split_plan.h)
    VerifyCase(ctx=(3000, 200, 900), n=2, heads=8, seed=100),  # 16 rows, uneven batch: the batch layout's
                                                               # build of the 16-row kernel
    VerifyCase(ctx=(5000, 700), n=4, heads=8, seed=101),      # 32 rows, uneven batch: the same for 32 rows
    VerifyCase(ctx=(9000, 300), n=8, heads=8, seed=102),      # 64 rows, uneven pair: fp16 partial states in the
                                                              # batch layout
    VerifyCase(ctx=tuple(range(150, 150 + 32 * 7, 7)), n=8, heads=8, seed=103),  # 64 rows x 32 requests: 4
                                                              # splits, the rows kernel's fp32 partial states
)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m kdgate.sanitize_run")
    parser.add_argument("--kernel", default=None)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    candidate = resolve(args.kernel)
    device = torch.device("cuda", torch.cuda.current_device())
    cases = [c for c in CASES if not (args.quick and c.heads > 16)]
    failures = 0
    for case in cases:
        outcome = run_case(candidate, build_inputs(case, device), compare_baseline=False)
        status = "ok" if outcome.report.passed else "FAIL"
        failures += not outcome.report.passed
        print(f"{status} {case.id}: {outcome.report.brief()}", flush=True)
    inputs = build_inputs(CASES[1], device)
    o = inputs.new_output()
    args, kwargs = inputs.call_args(o)
    candidate(*args, debug_checks=True, **kwargs) if candidate.debug_checks else candidate(*args, **kwargs)
    torch.cuda.synchronize()
    print(f"sanitize_run: {len(cases) - failures} passed, {failures} failed", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
