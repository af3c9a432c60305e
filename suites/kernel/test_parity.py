"""Kernel layer: parity within one bf16 ULP (docs/DESIGN.md rule) on a matrix of shapes, trees,
layouts and dtypes; kernel error at most 2x SGLang's Triton kernel's; every output
element written (outputs are poisoned with NaN first); LSE against the reference."""

import math

import pytest
import torch

from kdgate.kernel_run import run_candidate, run_case
from kdgate.verify_inputs import VerifyCase, build_inputs

pytestmark = [pytest.mark.kernel, pytest.mark.gpu]

MATRIX = (
    # context length sweep (bs 1, N 16, H 8, random tree)
    *[VerifyCase(ctx=(c,), n=16, heads=8) for c in (0, 1, 63, 64, 65, 4097, 16384, 65536, 131072)],
    # draft width sweep
    *[VerifyCase(ctx=(4097,), n=n, heads=16, seed=1) for n in (1, 2, 4, 8, 16, 33, 64)],
    # head sweep
    *[VerifyCase(ctx=(1000,), n=16, heads=h, seed=2) for h in (1, 8, 16, 128)],
    VerifyCase(ctx=(4097,), n=64, heads=128, seed=3),
    # batches with mixed lengths (ctx 0 and long ones together)
    VerifyCase(ctx=(0, 4097, 65), n=16, heads=16, seed=4),
    VerifyCase(ctx=(0, 1, 63, 64, 65, 500, 4097, 16384) * 4, n=8, heads=8, seed=5,
               indptr_dtype="int64", mask_dtype="uint8"),
    VerifyCase(ctx=(131072, 3, 2048), n=16, heads=8, seed=6),
    VerifyCase(ctx=(0, 131072), n=8, heads=16, seed=12, indptr_dtype="int64"),
    # tree shapes
    *[VerifyCase(ctx=(2048,), n=16, heads=16, tree=t, seed=7) for t in ("chain", "star", "random", "topk")],
    VerifyCase(ctx=(2048,), n=16, heads=16, tree="chain", mask_dtype="none", seed=7),
    # layouts and dtypes
    *[VerifyCase(ctx=(3000, 777), n=16, heads=16, fragmented=f, indptr_dtype=i, mask_dtype=m, seed=8)
      for f, i, m in ((False, "int32", "bool"), (True, "int32", "uint8"),
                      (False, "int64", "uint8"), (True, "int64", "bool"))],
    # the rows kernel (64 and 128 rows; the cases above of 256 rows run the seesaw kernel) over
    # consecutive slots: one request, one in the short layout, a batch
    VerifyCase(ctx=(20000,), n=16, heads=8, fragmented=False, seed=13),
    VerifyCase(ctx=(3000,), n=8, heads=8, fragmented=False, seed=14),
    VerifyCase(ctx=(5000, 700, 9000, 64), n=8, heads=8, fragmented=False, seed=15),
    # boundary-dominant: one wrongly included or dropped draft key moves the output far
    VerifyCase(ctx=(100,), n=16, heads=8, boundary=True, seed=9),
    VerifyCase(ctx=(4097,), n=64, heads=16, tree="chain", boundary=True, seed=10),
    VerifyCase(ctx=(0, 300, 5000), n=33, heads=8, tree="topk", boundary=True, seed=11),
)


@pytest.mark.parametrize("case", MATRIX, ids=[c.id for c in MATRIX])
def test_parity(candidate, cuda_device, case, gate_notes, gate_data):
    inputs = build_inputs(case, cuda_device)
    outcome = run_case(candidate, inputs)
    rep, base = outcome.report, outcome.baseline
    chain = outcome.chain_baseline
    gate_notes.append(f"parity {candidate.name} {case.id}: {rep.brief()} | triton: "
                      + (base.brief() if base else outcome.baseline_error or "n/a")
                      + (f" | verify_shared_kv: {chain.brief() if chain else outcome.chain_error}"
                         if case.tree == "chain" else ""))
    gate_data.append({"kind": "parity", "source": "synthetic", "candidate": candidate.name,
                      "case": case.id, "kernel": rep.figures(), "baseline": base.figures() if base else None})
    assert not outcome.problems(), f"{candidate.name} on {case.id}:\n{rep.summary()}" + (
        f"\ntriton baseline:\n{base.summary()}" if base else "")
    if candidate.writes_lse:
        lse_problem = outcome.lse_problem()
        assert lse_problem is None, lse_problem


def test_rows_with_no_visible_key_are_zero(candidate, cuda_device):
    """ctx 0 and a mask whose row 1 hides everything (even itself): output 0, not NaN."""
    inputs = build_inputs(VerifyCase(ctx=(0,), n=4, heads=8, tree="chain"), cuda_device)
    inputs.custom_mask[4:8] = False   # row 1 of the [4, 4] block
    o, _ = run_candidate(candidate, inputs, False)
    assert torch.equal(o[1].float(), torch.zeros_like(o[1].float())), o[1]
    assert not math.isnan(o[0].float().sum().item())


def test_padded_requests_are_safe(candidate, cuda_device):
    """CUDA-graph padding: extra requests with prefix length 1 at slot 0 and an all-true
    mask block. Their rows are computed from in-bounds reads; the real rows pass parity."""
    from kdtree.parity import check_parity
    from kdtree.reference import verify_reference

    inputs = build_inputs(VerifyCase(ctx=(700, 1, 1), n=8, heads=8, seed=13, indptr_dtype="int64",
                                     mask_dtype="uint8"), cuda_device)
    inputs.kv_indices[700:] = 0                      # the padding slot
    start = int(inputs.mask_indptr[1])
    inputs.custom_mask[start:] = 1                   # all-true blocks, as SGLang pads them
    out, _ = run_candidate(candidate, inputs, False)
    ref, scale, _ = verify_reference(*inputs.reference_args())
    report = check_parity(out, ref, scale)
    assert report.passed, report.summary()
