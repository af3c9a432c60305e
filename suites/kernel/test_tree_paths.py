"""Kernel layer: each tree node's output equals running its root-to-node path as a chain
(same prefix, the path's drafts only): two routes to the same attention."""

import pytest
import torch

from kdtree.bf16 import bf16_ulp
from kdgate.kernel_run import run_candidate
from kdgate.verify_inputs import VerifyCase, VerifyInputs, build_inputs

pytestmark = [pytest.mark.kernel, pytest.mark.gpu]


def path_to(parents, node):
    path = []
    while node >= 0:
        path.append(node)
        node = parents[node]
    return path[::-1]


@pytest.mark.parametrize("tree", ["random", "topk", "star"])
def test_tree_node_equals_its_path_as_a_chain(candidate, cuda_device, tree):
    case = VerifyCase(ctx=(1500,), n=16, heads=8, tree=tree, seed=21)
    tree_in = build_inputs(case, cuda_device)
    tree_out, _ = run_candidate(candidate, tree_in, False)
    parents = tree_in.parents[0]
    for node in range(case.n):
        path = path_to(parents, node)
        n = len(path)
        idx = torch.tensor(path, device=cuda_device)
        mask = torch.ones(n, 1500 + n, dtype=torch.bool, device=cuda_device)
        mask[:, 1500:] = torch.ones(n, n, dtype=torch.bool, device=cuda_device).tril()
        chain = VerifyInputs(
            case=VerifyCase(ctx=(1500,), n=n, heads=8, tree="chain"),
            q=tree_in.q[idx].contiguous(), k_extend=tree_in.k_extend[idx].contiguous(),
            v_extend=tree_in.v_extend[idx].contiguous(), k_buffer=tree_in.k_buffer,
            qo_indptr=torch.tensor([0, n], dtype=torch.int32, device=cuda_device),
            kv_indptr=torch.tensor([0, 1500], dtype=torch.int32, device=cuda_device),
            kv_indices=tree_in.kv_indices,
            custom_mask=mask.reshape(-1),
            mask_indptr=torch.tensor([0, n * (1500 + n)], dtype=torch.int64, device=cuda_device))
        chain_out, _ = run_candidate(candidate, chain, False)
        a, b = tree_out[node].double(), chain_out[n - 1].double()
        scale = torch.maximum(a.abs(), b.abs())
        diff = ((a - b).abs() / bf16_ulp(scale)).max().item()
        assert diff <= 2.0, f"node {node} (path {path}): tree and chain differ by {diff:.2f} ulp"
