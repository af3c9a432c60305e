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


def test_value_scale_scales_every_value_and_keeps_every_score():
    """value_scale = 2^k: V (the first 512 dims of every key, and v_extend) times 2^k, q's first
    512 dims times 2^-k, exactly, so every product q.k is the same (the split-combine layer's
    value-range cases rest on it)."""
    plain = VerifyCase(ctx=(300,), n=4, heads=8, seed=117)
    scaled = VerifyCase(ctx=(300,), n=4, heads=8, seed=117, value_scale=2.0 ** 20)
    a, b = build_inputs(plain, "cpu"), build_inputs(scaled, "cpu")
    assert torch.equal(b.k_buffer.double()[..., :512], a.k_buffer.double()[..., :512] * 2.0 ** 20)
    assert torch.equal(b.k_buffer[..., 512:], a.k_buffer[..., 512:])
    assert torch.equal(b.v_extend.double(), a.v_extend.double() * 2.0 ** 20)
    assert torch.equal(b.q.double()[..., :512], a.q.double()[..., :512] * 2.0 ** -20)
    assert torch.equal(scores_log2(b, scaled), scores_log2(a, plain))
    assert scaled.id.endswith("-v2^20") and scaled.id != plain.id


@pytest.mark.parametrize("value_scale", [0.0, -2.0, 3.0, 2.0 ** 61, float("inf")])
def test_value_scale_must_be_a_power_of_two_in_range(value_scale):
    with pytest.raises(ValueError, match="value_scale must be a power of two"):
        VerifyCase(ctx=(10,), n=2, heads=8, value_scale=value_scale)
