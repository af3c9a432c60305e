"""The synthetic input builder's prefix_jump option (kdgate.verify_inputs), which the kernel
layer's running-maximum cases rely on: the key at ctx - 10 of each request (aligned with the
mean of its queries) must raise most query rows' scores past the margin of the wgmma kernels'
running maximum (kRescaleMargin, 8 log2 units, kernels/csrc/wgmma/running_max.cuh) over every
other prefix key but the sink at position 0, so whichever later tile of a split holds it moves
the maximum there (one row that moves sends the whole CTA through the exchange)."""

import math

import pytest
import torch

from kdgate.verify_inputs import VerifyCase, build_inputs

RESCALE_MARGIN_LOG2 = 8.0


def scores_log2(inputs, case):
    """Each query row's scores over each request's prefix, log2 units: [rows, positions]."""
    q = inputs.q.float().reshape(-1, inputs.q.shape[-1])
    keys = inputs.k_buffer.float()[inputs.kv_indices.long(), 0]
    return q @ keys.T * case.sm_scale / math.log(2)


@pytest.mark.parametrize("n", [8, 16])
def test_the_jump_key_tops_every_other_prefix_key_by_more_than_the_margin_on_most_rows(n):
    case = VerifyCase(ctx=(3000,), n=n, heads=8, prefix_jump=True, seed=116)
    s = scores_log2(build_inputs(case, "cpu"), case)
    jump = s[:, 3000 - 10]
    others = torch.cat([s[:, 1:3000 - 10], s[:, 3000 - 9:3000]], dim=1).max(dim=1).values
    jumped = (jump - others > RESCALE_MARGIN_LOG2).float().mean().item()
    assert jumped > 0.5, f"only {jumped:.0%} of the rows jump past the margin"


def test_without_the_option_no_late_key_jumps():
    """The control: the same case without prefix_jump has no such key."""
    case = VerifyCase(ctx=(3000,), n=8, heads=8, seed=116)
    s = scores_log2(build_inputs(case, "cpu"), case)
    others = s[:, 1:3000 - 10].max(dim=1).values
    assert not bool((s[:, 3000 - 10] - others > RESCALE_MARGIN_LOG2).any())


def test_the_option_is_named_in_the_case_id():
    assert VerifyCase(ctx=(20100,), n=8, heads=8, prefix_jump=True).id.endswith("-jump")
    assert "jump" not in VerifyCase(ctx=(20100,), n=8, heads=8).id
