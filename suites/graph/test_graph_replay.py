"""Graph layer: the candidate captured in a CUDA graph at capacity replays bitwise equal
to eager runs after new lengths, trees and slots are written into the static buffers;
two graphs share one memory pool; capture allocates nothing and does not synchronize; a
graph captured before the kernel's split workspace grew still replays correctly; a graph of
fp16 partial states replays right at short and long lengths."""

import pytest
import torch

from kdgate.verify_inputs import VerifyCase, build_inputs
from .graph_harness import StaticBatch, replay_matches_eager, replays_match_eager

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


def test_graph_captured_before_the_workspace_grew_still_replays(candidate, cuda_device):
    """A serving engine captures graphs for several batch sizes; a later, larger one grows
    the split-KV workspace. The earlier graph keeps the buffers it captured: with them
    freed, its replay writes into released memory (an illegal address, or another
    tensor's data)."""
    if candidate.name != "kdtree":
        pytest.skip(f"not run: the split workspace belongs to the shipped kernel, not --kernel {candidate.name}")
    from kdtree import verify_op

    small = build_inputs(VerifyCase(ctx=(3000,), n=4, heads=8, seed=61), cuda_device)
    out = small.new_output()
    args, kwargs = small.call_args(out)
    verify_op._WORKSPACE.clear()           # start from the smallest workspace this call needs
    candidate(*args, **kwargs)
    torch.cuda.synchronize()
    expected = out.clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        candidate(*args, **kwargs)
    ws = verify_op._WORKSPACE[cuda_device.index or 0]
    captured = {name: (t.data_ptr(), t.numel()) for name, t in ws.items() if name in ("acc", "ml")}
    del ws
    big = build_inputs(VerifyCase(ctx=(9000,) * 4, n=16, heads=16, seed=62), cuda_device)
    big_args, big_kwargs = big.call_args(big.new_output())
    candidate(*big_args, **big_kwargs)     # eager: grows the workspace
    torch.cuda.synchronize()
    assert verify_op._WORKSPACE[cuda_device.index or 0]["acc"].data_ptr() != captured["acc"][0], \
        "the workspace did not grow"
    # same-sized allocations: a released buffer would be handed out again here
    fillers = [torch.full((numel,), 7.0, device=cuda_device) for _, numel in captured.values()]
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out.view(torch.int16), expected.view(torch.int16)), "replay after the growth differs"
    assert all(bool((f == 7.0).all()) for f in fillers), "the earlier graph wrote into memory handed out since"


def test_one_graph_of_fp16_partials_replays_at_short_and_long_lengths(candidate, cuda_device):
    """64 rows, 132 splits on the H200 launch the rows kernel's fp16 build at any length
    (split_plan.h: partials_fp16(), static sizes only), which writes fp32 partial states in the
    short layout (a 3k prefix) and fp16 ones past it (20k), and tells its combine which on the
    device. Captured once at a 20,000-position capacity, the graph must replay each step (3k,
    20k, 3k prefixes) bitwise like an eager call."""
    capacity = VerifyCase(ctx=(20000,), n=8, heads=8, indptr_dtype="int64", mask_dtype="uint8", seed=63)
    steps = [VerifyCase(ctx=(ctx,), n=8, heads=8, indptr_dtype="int64", mask_dtype="uint8", seed=64 + i)
             for i, ctx in enumerate((3000, 20000, 3000))]
    if candidate.name == "kdtree":
        from kdtree.verify_op import partials_fp16, plan

        splits, _, path, _ = plan(1, 8, 8, cuda_device)
        if not partials_fp16(path, 8, 8, 1, splits, 64):
            pytest.skip(f"not run: this GPU plans {splits} splits (path {path}) for 64 rows, which write fp32 "
                        f"partial states")
    ok, detail = replays_match_eager(candidate, cuda_device, capacity, steps)
    assert ok, detail
