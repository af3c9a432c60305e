"""Kernel layer: the combine of split-KV partials holds the parity rule (and writes the LSE)
in each of its shapes. The chunk kernel merges a query row's 128-column chunk with 1, 2, 4 or
8 warps, chosen by the split count (up to 8, 16, 32, more); the split count is steered
through the workspace budget (KDTREE_WORKSPACE_MB bounds splits x rows x 2056 bytes), and
each case checks that the plan landed in the intended range, so no group size goes untested
unnoticed. The chunk kernel is built for 4 CTAs per SM (every load of a batch in flight) or 8
(more CTAs per wave), picked by its grid size; the row kernel (one warp merges a whole query
row) takes few splits of many rows (combine_by_rows: more than 1,056 rows on 132 SMs). Each
build is held to the rule too (test_combine_holds_parity_in_every_build)."""

import pytest

from kdgate.kernel_run import run_case
from kdgate.verify_inputs import VerifyCase, build_inputs

pytestmark = [pytest.mark.kernel, pytest.mark.gpu]

# budget (MiB) -> split range for 64 rows (131,584 bytes per split), all on the chunk kernel
# (64 rows are too few for the row kernel): 1 warp per chunk up to 8 splits, 2 up to 16, 4 up
# to 32, 8 beyond (at most 24 splits per warp in batches of 8 loads: two batches up to 128
# splits; the third is test_combine_third_batch_holds_parity's)
BUDGETS = {1: (2, 8), 2: (9, 16), 4: (17, 32), 8: (33, 64), 16: (65, 128)}
CASES = (
    VerifyCase(ctx=(20000,), n=8, heads=8, seed=41),                    # 64 rows, trailing empty splits
    VerifyCase(ctx=(20000,), n=4, heads=16, tree="chain", seed=42),     # 64 rows, chain
)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
@pytest.mark.parametrize("budget_mb", sorted(BUDGETS))
def test_combine_holds_parity_with_every_group_size(candidate, cuda_device, case, budget_mb, monkeypatch,
                                                    gate_notes):
    if candidate.name != "kdtree":
        pytest.skip(f"not run: the split combine belongs to the shipped kernel, not --kernel {candidate.name}")
    from kdtree.verify_op import PATH_NAMES, plan

    monkeypatch.setenv("KDTREE_WORKSPACE_MB", str(budget_mb))
    splits, _, path, _ = plan(len(case.ctx), case.heads, case.n, cuda_device)
    path = PATH_NAMES[path]
    low, high = BUDGETS[budget_mb]
    if path == "portable" and splits < low:
        pytest.skip(f"not run: the portable path plans at most 32 splits ({splits} here)")
    assert low <= splits <= high, f"{budget_mb} MiB planned {splits} splits, expected {low}..{high}"
    outcome = run_case(candidate, build_inputs(case, cuda_device), compare_baseline=False)
    gate_notes.append(f"split combine, {splits} splits (plan {path}) {case.id}: {outcome.report.brief()}")
    assert not outcome.problems(), f"{splits} splits on {case.id}:\n{outcome.report.summary()}"
    lse_problem = outcome.lse_problem()
    assert lse_problem is None, f"{splits} splits: {lse_problem}"


# (case, CTAs per SM of the combine build it must take on the H200's 132 SMs, whether that is
# the row kernel)
BUILD_CASES = (
    (VerifyCase(ctx=(20000,), n=8, heads=8, seed=43), 4, False),       # 64 rows, 132 splits
    (VerifyCase(ctx=tuple(range(1500, 1500 + 5 * 97, 97)), n=16, heads=8, seed=46), 8, False),  # 640 rows, 13
    (VerifyCase(ctx=tuple(range(1500, 1500 + 16 * 97, 97)), n=16, heads=8, seed=44), 4, True),  # 2,048 rows, 8
)


@pytest.mark.parametrize("case,per_sm,by_rows", BUILD_CASES,
                         ids=[f"{c.id}-{'rows' if r else 'chunks'}-{k}-per-sm" for c, k, r in BUILD_CASES])
def test_combine_holds_parity_in_every_build(candidate, cuda_device, case, per_sm, by_rows, gate_notes):
    if candidate.name != "kdtree":
        pytest.skip(f"not run: the split combine belongs to the shipped kernel, not --kernel {candidate.name}")
    from kdtree.verify_op import combine_shape, plan

    splits, _, _, grid_splits = plan(len(case.ctx), case.heads, case.n, cuda_device)
    assert splits >= 2, f"{case.id}: planned {splits} split, the combine would not run"
    warps, ctas, built = combine_shape(len(case.ctx) * case.n * case.heads, grid_splits, cuda_device)
    assert built == per_sm, f"{case.id}: {ctas} combine CTAs took the {built}-per-SM build, expected {per_sm}"
    assert (warps == 1) == by_rows, f"{case.id}: {splits} splits took {warps} warps per row, row kernel {by_rows}"
    outcome = run_case(candidate, build_inputs(case, cuda_device), compare_baseline=False)
    gate_notes.append(f"combine {'row' if by_rows else 'chunk'} kernel, {built} per SM ({ctas} CTAs, {warps} warps "
                      f"per row, {splits} splits) {case.id}: {outcome.report.brief()}")
    assert not outcome.problems(), f"{case.id}:\n{outcome.report.summary()}"


@pytest.mark.parametrize("heads,n,tree", [(8, 8, "random"), (16, 4, "chain")])
def test_combine_third_batch_holds_parity(candidate, cuda_device, heads, n, tree, gate_notes):
    """bs 1 plans one split per SM (132 on the H200); a context of 128 x splits - 24 positions
    gives every split 128 positions but the last (104), so each warp of the combine merges up
    to 17 live splits: its third batch of loads."""
    if candidate.name != "kdtree":
        pytest.skip(f"not run: the split combine belongs to the shipped kernel, not --kernel {candidate.name}")
    from kdtree.verify_op import PATH_NAMES, plan

    splits, _, path, _ = plan(1, heads, n, cuda_device)
    if splits <= 128:
        pytest.skip(f"not run: this GPU's plan gives bs 1 {splits} splits; the third batch needs more than 128")
    case = VerifyCase(ctx=(128 * splits - 24 - n,), n=n, heads=heads, tree=tree, seed=45)
    outcome = run_case(candidate, build_inputs(case, cuda_device), compare_baseline=False)
    gate_notes.append(f"combine third batch, {splits} splits with KV positions (plan {PATH_NAMES[path]}) {case.id}: "
                      f"{outcome.report.brief()}")
    assert not outcome.problems(), f"{splits} splits on {case.id}:\n{outcome.report.summary()}"
