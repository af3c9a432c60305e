"""The fp64 reference against a direct per-row computation, on CPU."""

import math

import pytest
import torch

from kdgate.verify_inputs import VerifyCase, ancestor_mask, build_inputs, tree_parents
from kdtree.reference import verify_reference


def direct(inputs, b, i, h):
    """Row (request b, draft i, head h), computed key by key."""
    case = inputs.case
    q0 = int(inputs.qo_indptr[b])
    kv0, kv1 = int(inputs.kv_indptr[b]), int(inputs.kv_indptr[b + 1])
    prefix, n = kv1 - kv0, case.n
    query = inputs.q[q0 + i, h].double()
    keys, values = [], []
    for j in range(prefix):
        slot = int(inputs.kv_indices[kv0 + j])
        keys.append(inputs.k_buffer[slot, 0].double())
        values.append(inputs.k_buffer[slot, 0, :512].double())
    tree = ancestor_mask(inputs.parents[b])
    for d in range(n):
        if tree[i, d]:
            keys.append(inputs.k_extend[q0 + d, 0].double())
            values.append(inputs.v_extend[q0 + d, 0].double())
    scores = torch.stack([query @ k for k in keys]) * case.sm_scale
    p = torch.softmax(scores, 0)
    v = torch.stack(values)
    return p @ v, p @ v.abs(), torch.logsumexp(scores, 0)


@pytest.mark.parametrize("case", [
    VerifyCase(ctx=(5,), n=4, heads=2, tree="random", seed=1),
    VerifyCase(ctx=(0, 7, 3), n=3, heads=3, tree="star", seed=2, indptr_dtype="int64", mask_dtype="uint8"),
    VerifyCase(ctx=(9,), n=5, heads=1, tree="chain", mask_dtype="none", seed=3),
    VerifyCase(ctx=(4, 4), n=6, heads=2, tree="topk", fragmented=False, seed=4, boundary=True),
], ids=lambda c: c.id)
def test_reference_matches_direct_computation(case):
    inputs = build_inputs(case, "cpu")
    out, scale, lse = verify_reference(*inputs.reference_args())
    for b in range(len(case.ctx)):
        for i in range(case.n):
            for h in range(case.heads):
                o, s, l = direct(inputs, b, i, h)
                row = b * case.n + i
                assert torch.allclose(out[row, h], o, rtol=1e-12, atol=1e-12)
                assert torch.allclose(scale[row, h], s, rtol=1e-12, atol=1e-12)
                assert math.isclose(lse[row, h].item(), l.item(), rel_tol=1e-12)
    assert torch.all(scale >= out.abs() - 1e-12)


def test_row_without_visible_keys_is_zero_with_minus_inf_lse():
    inputs = build_inputs(VerifyCase(ctx=(0,), n=3, heads=2, tree="chain"), "cpu")
    inputs.custom_mask[3:6] = False      # row 1 sees nothing
    out, scale, lse = verify_reference(*inputs.reference_args())
    assert torch.equal(out[1], torch.zeros_like(out[1])) and torch.equal(scale[1], torch.zeros_like(scale[1]))
    assert lse[1].eq(float("-inf")).all() and torch.isfinite(lse[0]).all()


def test_tree_shapes():
    gen = torch.Generator().manual_seed(0)
    assert tree_parents("chain", 4, gen) == [-1, 0, 1, 2]
    assert tree_parents("star", 4, gen) == [-1, 0, 0, 0]
    assert tree_parents("topk", 7, gen) == [-1, 0, 0, 0, 0, 1, 1]
    parents = tree_parents("random", 16, gen)
    assert all(0 <= p < i for i, p in enumerate(parents) if i)
    mask = ancestor_mask(parents)
    assert torch.equal(mask, mask.tril()) and mask.diagonal().all() and mask[:, 0].all()


def test_is_causal_hides_later_drafts_even_where_the_mask_is_set():
    """CUDA-graph padding blocks are all-true; with is_causal a draft still sees only
    itself and earlier drafts (as SGLang's Triton kernel does)."""
    inputs = build_inputs(VerifyCase(ctx=(3,), n=4, heads=2, tree="star", seed=5), "cpu")
    inputs.custom_mask[:] = True
    causal, _, _ = verify_reference(*inputs.reference_args())
    full, _, _ = verify_reference(*inputs.reference_args(), is_causal=False)
    chain = build_inputs(VerifyCase(ctx=(3,), n=4, heads=2, tree="chain", seed=5), "cpu")
    chain_out, _, _ = verify_reference(*chain.reference_args())
    assert torch.equal(causal, chain_out)
    assert not torch.equal(causal[:3], full[:3]) and torch.equal(causal[3], full[3])
