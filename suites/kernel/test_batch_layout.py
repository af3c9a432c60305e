"""Kernel layer: a batch whose plan gives the workspace more slots per request than the grid
has splits runs, when its lengths are uneven, in the batch layout
(kernels/csrc/common/batch_layout.cuh; every kernel but the seesaw one, which balances its
grid instead, and the cases below stay under its thresholds). Its CTAs cut each request into
as many pieces as its share of the batch's positions, a long request into more pieces than
the grid has splits per request and a short one into fewer, and the CTA with a request's last
piece marks the request's slots past its pieces as empty. Each case first runs a batch whose
first request is long, which leaves live partial states in that request's slots, then a batch
of the same shape whose first request is short: a slot the layout failed to mark would be
merged into the second batch's output. Each call must hold the parity rule and write the LSE.

The negative control runs the same pairs with the kernel built with
KDTREE_FAULT_BATCH_LAYOUT_UNMARKED (no marks) and must fail parity: the short request's slots
past its pieces really hold the first batch's partials, so the marks are what keeps them out.
"""

import pytest

from kdgate.candidates import resolve
from kdgate.verify_inputs import VerifyCase
from .stale_workspace import run_after, skip_unless_shipped_kernel

pytestmark = [pytest.mark.kernel, pytest.mark.gpu]

# (long request first, then the same shape with the long request moved to the end)
PAIRS = (
    (VerifyCase(ctx=(60000, 500, 500, 500), n=8, heads=8, seed=71),
     VerifyCase(ctx=(500, 500, 500, 60000), n=8, heads=8, seed=72)),     # 64 rows: the rows kernel
    (VerifyCase(ctx=(30000, 1000, 2000), n=4, heads=8, tree="chain", seed=73),
     VerifyCase(ctx=(1000, 2000, 30000), n=4, heads=8, tree="chain", seed=74)),  # 32 rows: transposed
    (VerifyCase(ctx=(40000,) + (800,) * 7, n=16, heads=8, seed=75),
     VerifyCase(ctx=(800,) * 7 + (40000,), n=16, heads=8, boundary=True, seed=76)),  # 2 row blocks
    (VerifyCase(ctx=(20000,) + (2000,) * 31, n=8, heads=8, seed=79),
     VerifyCase(ctx=(2000,) * 31 + (20000,), n=8, heads=8, seed=80)),  # 64 rows at bs 32: 4 grid splits
)
IDS = [f"n{s.n}-h{s.heads}-bs{len(s.ctx)}" for _, s in PAIRS]


def _batch_layout_or_skip(case: VerifyCase, device) -> None:
    """Skip, saying why, unless this device's plan gives ``case`` the batch layout: more
    workspace slots per request than grid splits (kernels/csrc/verify_api.cu, kdtree_plan), on
    a kernel that does not balance its grid instead (split_plan.h, grid_balances)."""
    from kdtree.verify_op import PATH_NAMES, grid_balances, plan

    slots, _, path, grid_splits = plan(len(case.ctx), case.heads, case.n, device)
    if slots <= grid_splits:
        pytest.skip(f"not run: this device plans {PATH_NAMES[path]} with {grid_splits} splits and "
                    f"{slots} slots per request for {case.id}: no batch layout")
    if grid_balances(path, case.n, case.heads, len(case.ctx)):
        pytest.skip(f"not run: {case.id} runs the seesaw kernel, which balances its grid: no batch layout")


@pytest.mark.parametrize("first,second", PAIRS, ids=IDS)
def test_batch_after_a_batch_of_other_lengths_holds_parity(candidate, cuda_device, first, second, gate_notes):
    skip_unless_shipped_kernel(candidate, "batch layout")
    _batch_layout_or_skip(second, cuda_device)
    for case, outcome in zip((first, second), run_after(candidate, first, second, cuda_device)):
        gate_notes.append(f"batch layout {case.id}: {outcome.report.brief()}")
        assert not outcome.problems(), f"{case.id}:\n{outcome.report.summary()}"
        lse_problem = outcome.lse_problem()
        assert lse_problem is None, f"{case.id}: {lse_problem}"


@pytest.mark.parametrize("first,second", PAIRS, ids=IDS)
@pytest.mark.gate_selfcheck
def test_unmarked_batch_layout_fails_parity(cuda_device, first, second):
    _batch_layout_or_skip(second, cuda_device)
    _, outcome = run_after(resolve("kdgate.broken_kernels:batch_layout_unmarked"), first, second, cuda_device)
    assert not outcome.report.passed, f"batch_layout_unmarked passed parity on {second.id}:\n{outcome.report.summary()}"


# (uneven batch, then one of near-equal lengths of the same shape: the grid's own layout)
EVEN_AFTER_UNEVEN = (
    (VerifyCase(ctx=(60000, 500, 500, 500), n=8, heads=8, seed=81),
     VerifyCase(ctx=(15000, 15500, 14000, 16000), n=8, heads=8, seed=82)),
    (VerifyCase(ctx=(20000,) + (2000,) * 31, n=8, heads=8, seed=83),
     VerifyCase(ctx=(2000,) * 32, n=8, heads=8, seed=84)),
)


@pytest.mark.parametrize("first,second", EVEN_AFTER_UNEVEN, ids=[f"n{s.n}-h{s.heads}-bs{len(s.ctx)}-even"
                                                                 for _, s in EVEN_AFTER_UNEVEN])
def test_near_equal_batch_after_an_uneven_one_merges_only_its_grid_splits(candidate, cuda_device, first, second,
                                                                          gate_notes):
    """A batch whose longest request is at most 5/4 of the mean keeps the grid's own layout;
    the slots past its grid splits still hold the uneven batch's partials, which the combine
    must not merge (merged_slots())."""
    skip_unless_shipped_kernel(candidate, "batch layout")
    _batch_layout_or_skip(second, cuda_device)
    for case, outcome in zip((first, second), run_after(candidate, first, second, cuda_device)):
        gate_notes.append(f"grid layout after the batch layout {case.id}: {outcome.report.brief()}")
        assert not outcome.problems(), f"{case.id}:\n{outcome.report.summary()}"


@pytest.mark.parametrize("first,second", EVEN_AFTER_UNEVEN, ids=[f"n{s.n}-h{s.heads}-bs{len(s.ctx)}-even"
                                                                 for _, s in EVEN_AFTER_UNEVEN])
@pytest.mark.gate_selfcheck
def test_merging_every_slot_after_an_uneven_batch_fails_parity(cuda_device, first, second):
    """Negative control: built with KDTREE_FAULT_GRID_LAYOUT_MERGES_ALL the combine ignores the
    main kernel's layout flag and merges the uneven batch's leftover slots."""
    _batch_layout_or_skip(second, cuda_device)
    _, outcome = run_after(resolve("kdgate.broken_kernels:grid_layout_merges_all"), first, second, cuda_device)
    assert not outcome.report.passed, f"grid_layout_merges_all passed parity on {second.id}:\n{outcome.report.summary()}"
