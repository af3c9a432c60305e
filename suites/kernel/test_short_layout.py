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
from kdgate.verify_inputs import VerifyCase
from .stale_workspace import run_after, skip_unless_shipped_kernel

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


# kernels/csrc/split_plan.h: kMinChunkWgmma, the fewest KV positions the grid gives a split
MIN_CHUNK = 128
SHORT_BLOCK_ROWS = 16


def _short_layout_or_skip(case: VerifyCase, device) -> None:
    """Skip, saying why, unless this device's plan runs ``case`` in the short layout
    (kernels/csrc/wgmma/short_layout.cuh: bs 1, one 64-row block on the rows kernel, at least 2
    short splits, and at most (splits / 2) x MIN_CHUNK positions); the pairs are sized for the
    H200's 132 SMs."""
    from kdtree.verify_op import PATH_NAMES, plan

    splits, row_blocks, path, _ = plan(len(case.ctx), case.heads, case.n, device)
    rows, length = case.n * case.heads, case.ctx[0] + case.n
    if PATH_NAMES[path] != "wgmma-64" or row_blocks != 1:
        pytest.skip(f"not run: the short layout belongs to the rows kernel; this device plans {PATH_NAMES[path]} "
                    f"with {row_blocks} row blocks for {case.id}")
    if splits // -(-rows // SHORT_BLOCK_ROWS) < 2 or length > splits // 2 * MIN_CHUNK:
        pytest.skip(f"not run: with this device's {splits} splits, {case.id} ({length} positions) is not short")


@pytest.mark.parametrize("long,short", PAIRS, ids=IDS)
def test_short_call_after_a_long_one_holds_parity(candidate, cuda_device, long, short, gate_notes):
    skip_unless_shipped_kernel(candidate, "short layout")
    _short_layout_or_skip(short, cuda_device)
    first, outcome = run_after(candidate, long, short, cuda_device)
    assert not first.problems(), f"long call {long.id}:\n{first.report.summary()}"
    gate_notes.append(f"short layout {short.id} after {long.id}: {outcome.report.brief()}")
    assert not outcome.problems(), f"{short.id} after {long.id}:\n{outcome.report.summary()}"
    lse_problem = outcome.lse_problem()
    assert lse_problem is None, f"{short.id}: {lse_problem}"


@pytest.mark.parametrize("long,short", PAIRS, ids=IDS)
@pytest.mark.gate_selfcheck
def test_unmarked_short_layout_fails_parity(cuda_device, long, short):
    _short_layout_or_skip(short, cuda_device)
    _, outcome = run_after(resolve("kdgate.broken_kernels:short_layout_unmarked"), long, short, cuda_device)
    assert not outcome.report.passed, f"short_layout_unmarked passed parity on {short.id}:\n{outcome.report.summary()}"
