"""Kernel layer: a one-request call of 33-64 rows whose KV is short runs in the rows kernel's
short layout (kernels/csrc/wgmma/short_layout.cuh): its CTAs take the rows in 16-row blocks
and a quarter of the splits, and mark the grid's splits past their own as empty. Each case
first runs a long call of the same shape, which leaves live partial states in every split of
the workspace, then the short call: a split the layout failed to mark would be merged into
the short call's output. The short call must hold the parity rule and write the LSE.

The negative control runs the same pairs with the kernel built with
KDTREE_FAULT_SHORT_LAYOUT_UNMARKED (no marks) and must fail parity; it also shows that the
short layout really runs on these cases (were it not taken, the fault would change nothing).
"""

import pytest

from kdgate.candidates import resolve
from kdgate.kernel_run import run_case
from kdgate.verify_inputs import VerifyCase, build_inputs

pytestmark = [pytest.mark.kernel, pytest.mark.gpu]

# (long call, short call of the same shape); the layouts on the H200's 132 SMs
PAIRS = (
    (VerifyCase(ctx=(20000,), n=8, heads=8, seed=61),
     VerifyCase(ctx=(2000,), n=8, heads=8, seed=62)),                  # 64 rows: 4 blocks x 33 splits
    (VerifyCase(ctx=(20000,), n=6, heads=8, seed=63),
     VerifyCase(ctx=(700,), n=6, heads=8, boundary=True, seed=64)),    # 48 rows: 3 x 44
    (VerifyCase(ctx=(20000,), n=4, heads=16, tree="chain", seed=65),
     VerifyCase(ctx=(8000,), n=4, heads=16, tree="chain", seed=66)),   # 64 rows, near the threshold (8,448)
)
IDS = [f"n{s.n}-h{s.heads}-ctx{s.ctx[0]}-after-ctx{long.ctx[0]}" for long, s in PAIRS]


def _wgmma_or_skip(case: VerifyCase, device) -> None:
    from kdtree.verify_op import PATH_NAMES, plan

    splits, _, path, _ = plan(len(case.ctx), case.heads, case.n, device)
    if not PATH_NAMES[path].startswith("wgmma"):
        pytest.skip(f"not run: the short layout belongs to the wgmma path; this device plans {PATH_NAMES[path]}")
    assert splits >= 2, f"{case.id}: planned {splits} split, the short layout needs a split grid"


@pytest.mark.parametrize("long,short", PAIRS, ids=IDS)
def test_short_call_after_a_long_one_holds_parity(candidate, cuda_device, long, short, gate_notes):
    if candidate.name != "kdtree":
        pytest.skip(f"not run: the short layout belongs to the shipped kernel, not --kernel {candidate.name}")
    _wgmma_or_skip(short, cuda_device)
    first = run_case(candidate, build_inputs(long, cuda_device), compare_baseline=False)
    assert not first.problems(), f"long call {long.id}:\n{first.report.summary()}"
    outcome = run_case(candidate, build_inputs(short, cuda_device), compare_baseline=False)
    gate_notes.append(f"short layout {short.id} after {long.id}: {outcome.report.brief()}")
    assert not outcome.problems(), f"{short.id} after {long.id}:\n{outcome.report.summary()}"
    lse_problem = outcome.lse_problem()
    assert lse_problem is None, f"{short.id}: {lse_problem}"


@pytest.mark.parametrize("long,short", PAIRS, ids=IDS)
def test_unmarked_short_layout_fails_parity(cuda_device, long, short):
    _wgmma_or_skip(short, cuda_device)
    broken = resolve("kdgate.broken_kernels:short_layout_unmarked")
    run_case(broken, build_inputs(long, cuda_device), compare_baseline=False)
    outcome = run_case(broken, build_inputs(short, cuda_device), compare_baseline=False)
    assert not outcome.report.passed, f"short_layout_unmarked passed parity on {short.id}:\n{outcome.report.summary()}"
