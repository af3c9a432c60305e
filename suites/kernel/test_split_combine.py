"""Kernel layer: the combine of split-KV partials holds the parity rule (and writes the LSE)
in each of its shapes. The chunk kernel merges a query row's 128-column chunk with 1, 2, 4 or
8 warps, chosen by the split count (up to 8, 16, 32, more); the split count is steered
through the workspace budget (KDTREE_WORKSPACE_MB bounds splits x rows x the partial state's
bytes per row, verify_op.partial_layout()), and each case checks that the plan landed in the
intended range, so no group size goes untested unnoticed. The chunk kernel is built for 4 CTAs
per SM (every load of a batch in flight) or 8 (more CTAs per wave), picked by its grid size;
the row kernel (one warp merges a whole query row) takes few splits of many rows
(combine_by_rows: more than 1,056 rows on 132 SMs). Each build is held to the rule too
(test_combine_holds_parity_in_every_build). Partial values are fp32, or fp16 scaled per
128-column chunk in a 64-row call past the format threshold (split_plan.h):
test_partials_keep_their_precision_at_any_value_range holds the rule in both, where unscaled
fp16 would overflow or flush to zero."""

import pytest

from kdgate.kernel_run import run_case
from kdgate.verify_inputs import VerifyCase, build_inputs

pytestmark = [pytest.mark.kernel, pytest.mark.gpu]

# split ranges for 64 rows, each planned with a budget of the range's top split count, all on
# the chunk kernel (64 rows are too few for the row kernel): 1 warp per chunk up to 8 splits, 2
# up to 16, 4 up to 32, 8 beyond (at most 24 splits per warp in batches of 8 loads: two
# batches up to 128 splits; the third is test_combine_third_batch_holds_parity's)
SPLIT_RANGES = ((2, 8), (9, 16), (17, 32), (33, 64), (65, 128))
CASES = (
    VerifyCase(ctx=(20000,), n=8, heads=8, seed=41),                    # 64 rows, trailing empty splits
    VerifyCase(ctx=(20000,), n=4, heads=16, tree="chain", seed=42),     # 64 rows, chain
)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
@pytest.mark.parametrize("low, high", SPLIT_RANGES, ids=[f"splits{low}-{high}" for low, high in SPLIT_RANGES])
def test_combine_holds_parity_with_every_group_size(candidate, cuda_device, case, low, high, monkeypatch,
                                                    gate_notes):
    if candidate.name != "kdtree":
        pytest.skip(f"not run: the split combine belongs to the shipped kernel, not --kernel {candidate.name}")
    from kdtree.verify_op import PATH_NAMES, _library, partial_layout, plan

    value_bytes, scalars = partial_layout(_library())
    budget_mb = high * case.n * case.heads * (value_bytes + 4 * scalars) / (1 << 20)  # exact: a dyadic fraction
    monkeypatch.setenv("KDTREE_WORKSPACE_MB", repr(budget_mb))
    splits, _, path, _ = plan(len(case.ctx), case.heads, case.n, cuda_device)
    path = PATH_NAMES[path]
    if path == "portable" and splits < low:
        pytest.skip(f"not run: the portable path plans at most 32 splits ({splits} here)")
    assert low <= splits <= high, f"{budget_mb!r} MiB planned {splits} splits, expected {low}..{high}"
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
    from kdtree.verify_op import combine_shape, partials_fp16, plan

    splits, _, path, grid_splits = plan(len(case.ctx), case.heads, case.n, cuda_device)
    assert splits >= 2, f"{case.id}: planned {splits} split, the combine would not run"
    warps, ctas, built = combine_shape(len(case.ctx) * case.n * case.heads, grid_splits, cuda_device)
    assert built == per_sm, f"{case.id}: {ctas} combine CTAs took the {built}-per-SM build, expected {per_sm}"
    assert (warps == 1) == by_rows, f"{case.id}: {splits} splits took {warps} warps per row, row kernel {by_rows}"
    outcome = run_case(candidate, build_inputs(case, cuda_device), compare_baseline=False)
    fp16 = partials_fp16(path, case.n, case.heads, len(case.ctx), splits, len(case.ctx) * case.n * case.heads)
    gate_notes.append(f"combine {'row' if by_rows else 'chunk'} kernel, {built} per SM ({ctas} CTAs, {warps} warps "
                      f"per row, {splits} splits, {'fp16' if fp16 else 'fp32'}) {case.id}: {outcome.report.brief()}")
    assert not outcome.problems(), f"{case.id}:\n{outcome.report.summary()}"


@pytest.mark.parametrize("build", ["partials_fp32", "partials_fp16"])
@pytest.mark.parametrize("case,per_sm,by_rows", BUILD_CASES,
                         ids=[f"{c.id}-{'rows' if r else 'chunks'}-{k}-per-sm" for c, k, r in BUILD_CASES])
def test_every_combine_build_reads_both_partial_formats(candidate, cuda_device, build, case, per_sm, by_rows,
                                                        gate_notes):
    """The format rule leaves some pairs unreached on one GPU (the H200's row combine only
    ever meets fp32 partials, split_plan.h: partials_fp16()): builds that fix the format
    (kdgate.shipped_builds) hold each combine build to the rule in both."""
    if candidate.name != "kdtree":
        pytest.skip(f"not run: the partial formats belong to the shipped kernel, not --kernel {candidate.name}")
    from kdgate.candidates import resolve

    outcome = run_case(resolve(f"kdgate.shipped_builds:{build}"), build_inputs(case, cuda_device),
                       compare_baseline=False)
    gate_notes.append(f"combine {'row' if by_rows else 'chunk'} kernel, {per_sm} per SM, {build} {case.id}: "
                      f"{outcome.report.brief()}")
    assert not outcome.problems(), f"{build} on {case.id}:\n{outcome.report.summary()}"


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


# (case, path, fp16, build): partial values far above fp16's largest finite value (2^20 x V) and
# far below its smallest normal one (2^-30 x V), in every kernel that writes partials on the H200
# and in both formats (split_plan.h: partials_fp16()): the 16-row and 32-row kernels (fp32), the
# rows kernel (64 rows, 132 splits: its fp16 build, which writes fp32 in the short layout at ctx
# 3000 and fp16 at 20000; its fp32 build, kdgate.shipped_builds:partials_fp32, for the other
# format) and the seesaw kernel (512 rows, fp32). fp16: the launch takes the fp16 build; build
# None: the shipped rule.
RANGE_SHAPES = ((3000, 2, "wgmma-16", False, None), (20000, 4, "wgmma-32", False, None),
                (3000, 8, "wgmma-64", True, None), (20000, 8, "wgmma-64", True, None),
                (20000, 8, "wgmma-64", False, "partials_fp32"), (20000, 64, "wgmma-64", False, None))
RANGE_CASES = tuple(
    (VerifyCase(ctx=(ctx,), n=n, heads=8, seed=47 + i, value_scale=scale), path, fp16, build)
    for i, (ctx, n, path, fp16, build) in enumerate(RANGE_SHAPES)
    for scale in (2.0 ** 20, 2.0 ** -30)
)


@pytest.mark.parametrize("case,path,fp16,build", RANGE_CASES,
                         ids=[f"{c.id}-{b or 'shipped'}" for c, _, _, b in RANGE_CASES])
def test_partials_keep_their_precision_at_any_value_range(candidate, cuda_device, case, path, fp16, build,
                                                         gate_notes):
    """V scaled by a power of two (q's first 512 dims by its inverse: the same scores, the output
    scaled exactly): fp32 partials hold any range, and each 128-column chunk of an fp16 partial
    row is stored at its own power of two, so the rule holds where fp16 at a fixed scale would
    overflow (2^20) or lose every bit (2^-30); broken_kernels:partial_unscaled (one fixed scale)
    fails the fp16 cases."""
    if candidate.name != "kdtree":
        pytest.skip(f"not run: the partial format belongs to the shipped kernel, not --kernel {candidate.name}")
    from kdtree.verify_op import PATH_NAMES, partials_fp16, plan

    splits, _, planned, _ = plan(len(case.ctx), case.heads, case.n, cuda_device)
    if PATH_NAMES[planned] != path:
        pytest.skip(f"not run: this GPU plans {PATH_NAMES[planned]} for {case.id}, the case is for {path}")
    assert splits >= 2, f"{case.id}: planned {splits} split, no partial would be written"
    runner = candidate
    if build is None:
        takes_fp16 = partials_fp16(planned, case.n, case.heads, 1, splits, case.n * case.heads)
        assert takes_fp16 == fp16, f"{case.id}: {splits} splits take {'fp16' if takes_fp16 else 'fp32'} partials"
    else:
        from kdgate.candidates import resolve

        runner = resolve(f"kdgate.shipped_builds:{build}")
    outcome = run_case(runner, build_inputs(case, cuda_device), compare_baseline=False)
    gate_notes.append(f"partial range x{case.value_scale:g}, {splits} splits ({path}, "
                      f"{'fp16 build' if fp16 else 'fp32 build'}, {build or 'shipped rule'}) {case.id}: "
                      f"{outcome.report.brief()}")
    assert not outcome.problems(), f"{case.id}:\n{outcome.report.summary()}"
