"""Kernel layer: the rows kernel and the 16/32-row kernel move a row's running maximum only
when a tile's row maximum exceeds it by more than a margin (kernels/csrc/wgmma/running_max.cuh),
so on most inputs O's accumulators are never rescaled after a split's first tile. These cases
put a jump past the margin on a later tile of a split: ``boundary`` aligns the draft keys with
their queries, and each length puts the drafts a whole tile or more into the split that holds
them, after prefix tiles whose weights are already in O (the layouts on the H200's 132 SMs).
The shipped kernel must hold the parity rule and write the LSE there.

``prefix_jump`` puts such a jump on a prefix tile instead (the key at ctx - 10, in the tile
before the drafts', a later tile of its split): there the rows kernel first forms P against
the old maximum, then finds that a maximum moved and exchanges the maxima and forms P again
(verify_kernel_rows.cuh).

The negative control runs the same cases built with KDTREE_FAULT_NO_RESCALE (a moved maximum
never rescales O) and must fail parity: it shows that each case really rescales O after a
tile with visible scores, the path the margin leaves to a few tiles.
"""

import pytest

from kdgate.candidates import resolve
from kdgate.kernel_run import run_case
from kdgate.verify_inputs import VerifyCase, build_inputs
from .stale_workspace import skip_unless_shipped_kernel

pytestmark = [pytest.mark.kernel, pytest.mark.gpu]

# the split holding the drafts starts this many tiles before them (132 splits at 16-64 rows,
# 66 at 128, the short layout's 33 at ctx 2000)
CASES = (
    VerifyCase(ctx=(20100,), n=8, heads=8, boundary=True, seed=111),     # rows kernel, 64 rows: 2 tiles
    VerifyCase(ctx=(20100,), n=16, heads=8, boundary=True, seed=112),    # rows kernel, 128 rows: 4
    VerifyCase(ctx=(2000,), n=8, heads=8, boundary=True, seed=113),      # rows kernel, short layout: 1
    VerifyCase(ctx=(20100,), n=2, heads=8, boundary=True, seed=114),     # 16-row kernel: 2
    VerifyCase(ctx=(20100,), n=4, heads=8, tree="chain", boundary=True, seed=115),  # 32-row kernel: 2
)
CASES += (
    VerifyCase(ctx=(20100,), n=8, heads=8, prefix_jump=True, seed=116),     # rows kernel, 64 rows
    VerifyCase(ctx=(20100,), n=16, heads=8, prefix_jump=True, seed=117),    # rows kernel, 128 rows
)
IDS = [c.id for c in CASES]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_a_maximum_raised_past_the_margin_on_a_later_tile_holds_parity(candidate, cuda_device, case, gate_notes):
    skip_unless_shipped_kernel(candidate, "running maximum's margin")
    outcome = run_case(candidate, build_inputs(case, cuda_device), compare_baseline=False)
    gate_notes.append(f"running maximum raised on a later tile {case.id}: {outcome.report.brief()}")
    assert not outcome.problems(), f"{case.id}:\n{outcome.report.summary()}"
    lse_problem = outcome.lse_problem()
    assert lse_problem is None, f"{case.id}: {lse_problem}"


@pytest.mark.parametrize("case", CASES, ids=IDS)
@pytest.mark.gate_selfcheck
def test_never_rescaling_fails_parity(cuda_device, case):
    outcome = run_case(resolve("kdgate.broken_kernels:no_rescale"), build_inputs(case, cuda_device),
                       compare_baseline=False)
    assert not outcome.report.passed, f"no_rescale passed parity on {case.id}:\n{outcome.report.summary()}"
