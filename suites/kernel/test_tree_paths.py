"""Kernel layer: each tree node's output equals running its root-to-node path as a chain
(same prefix, the path's drafts only): two routes to the same attention. Each route is held
to one ULP at the parity rule's scale (docs/DESIGN.md: max(|ref|, sum p|v|) per element), so the
two may differ by two ULPs at that scale; a near-zero output that cancels is judged at the
scale of the terms that cancelled, not at its own magnitude. Two cases: 1,500 prefix keys
(split KV and the combine), and 20 with draft keys aligned with the queries (the drafts
carry most of the weight, so a draft-mask fault moves the outputs by far more than two ULPs:
the negative control)."""

import pytest
import torch

from kdtree.bf16 import bf16_ulp
from kdgate.kernel_run import run_candidate, run_case
from kdgate.verify_inputs import VerifyCase, VerifyInputs, build_inputs

pytestmark = [pytest.mark.kernel, pytest.mark.gpu]


def path_to(parents, node):
    path = []
    while node >= 0:
        path.append(node)
        node = parents[node]
    return path[::-1]


@pytest.mark.parametrize("tree", ["random", "topk", "star"])
@pytest.mark.parametrize("ctx, boundary", [(1500, False), (20, True)], ids=["ctx1500", "ctx20-boundary"])
def test_tree_node_equals_its_path_as_a_chain(candidate, cuda_device, ctx, boundary, tree):
    case = VerifyCase(ctx=(ctx,), n=16, heads=8, tree=tree, seed=21, boundary=boundary)
    tree_in = build_inputs(case, cuda_device)
    outcome = run_case(candidate, tree_in, compare_baseline=False)
    tree_out, tree_scale = outcome.output, outcome.reference_scale.to(outcome.output.device)
    parents = tree_in.parents[0]
    for node in range(case.n):
        path = path_to(parents, node)
        n = len(path)
        idx = torch.tensor(path, device=cuda_device)
        mask = torch.ones(n, ctx + n, dtype=torch.bool, device=cuda_device)
        mask[:, ctx:] = torch.ones(n, n, dtype=torch.bool, device=cuda_device).tril()
        chain = VerifyInputs(
            case=VerifyCase(ctx=(ctx,), n=n, heads=8, tree="chain"),
            q=tree_in.q[idx].contiguous(), k_extend=tree_in.k_extend[idx].contiguous(),
            v_extend=tree_in.v_extend[idx].contiguous(), k_buffer=tree_in.k_buffer,
            qo_indptr=torch.tensor([0, n], dtype=torch.int32, device=cuda_device),
            kv_indptr=torch.tensor([0, ctx], dtype=torch.int32, device=cuda_device),
            kv_indices=tree_in.kv_indices,
            custom_mask=mask.reshape(-1),
            mask_indptr=torch.tensor([0, n * (ctx + n)], dtype=torch.int64, device=cuda_device))
        chain_out, _ = run_candidate(candidate, chain, False)
        a, b = tree_out[node].double(), chain_out[n - 1].double()
        scale = torch.maximum(torch.maximum(a.abs(), b.abs()), tree_scale[node])
        diff = ((a - b).abs() / bf16_ulp(scale)).max().item()
        assert diff <= 2.0, f"node {node} (path {path}): tree and chain differ by {diff:.2f} ulp"
