"""Graph layer: the candidate captured in a CUDA graph at capacity replays bitwise equal
to eager runs after new lengths, trees and slots are written into the static buffers;
two graphs share one memory pool; capture allocates nothing and does not synchronize."""

import pytest
import torch

from suites.graph.graph_harness import StaticBatch, replay_matches_eager

pytestmark = [pytest.mark.graph, pytest.mark.gpu]


def test_replay_matches_eager_on_new_inputs(candidate, cuda_device):
    ok, detail = replay_matches_eager(candidate, cuda_device, seed=60)
    assert ok, detail


def test_two_graphs_in_one_pool_and_no_allocation_during_capture(candidate, cuda_device):
    batch = StaticBatch(cuda_device)
    args, kwargs = batch.inputs.call_args(batch.o)
    candidate(*args, **kwargs)
    torch.cuda.synchronize()
    o2 = batch.inputs.new_output()
    args2, kwargs2 = batch.inputs.call_args(o2)
    pool = torch.cuda.graph_pool_handle()
    g1, g2 = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()

    def allocations():
        return torch.cuda.memory_stats(cuda_device).get("allocation.all.allocated", 0)

    counts = []
    for graph, a, kw in ((g1, args, kwargs), (g2, args2, kwargs2)):
        with torch.cuda.graph(graph, pool=pool):  # capture mode "global": a sync would raise
            before = allocations()
            candidate(*a, **kw)
            counts.append(allocations() - before)
    assert counts == [0, 0], f"allocations during capture: {counts}"
    batch.o.fill_(float("nan"))
    o2.fill_(float("nan"))
    g1.replay()
    g2.replay()
    torch.cuda.synchronize()
    assert torch.equal(batch.o.view(torch.int16), o2.view(torch.int16))
    assert not torch.isnan(batch.o.float()).any()
