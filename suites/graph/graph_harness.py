"""Capture a candidate in a CUDA graph at capacity and compare replays with eager runs
on new lengths, trees and slots written into the same static buffers."""

from __future__ import annotations

import torch

from kdgate.verify_inputs import VerifyCase, build_inputs

CAPACITY = VerifyCase(ctx=(4096, 4096, 4096), n=16, heads=8, indptr_dtype="int64",
                      mask_dtype="uint8", seed=50)


class StaticBatch:
    """Static buffers sized for ``capacity`` (default CAPACITY); ``load`` copies a smaller
    batch into them the way SGLang's graph runner does (padding requests get seq_len 1 at
    slot 0)."""

    def __init__(self, device, capacity: VerifyCase = CAPACITY):
        cap = build_inputs(capacity, device)
        self.capacity = capacity
        self.inputs = cap
        self.o = cap.new_output()
        self.mask_capacity = cap.custom_mask.numel()

    def load(self, case: VerifyCase, device) -> None:
        new = build_inputs(case, device)
        cap = self.inputs
        bs_cap, n = len(self.capacity.ctx), self.capacity.n
        bs = len(case.ctx)
        assert case.n == n and bs <= bs_cap and case.heads == self.capacity.heads
        T = bs * n
        cap.q[:T].copy_(new.q)
        cap.k_extend[:T].copy_(new.k_extend)
        cap.v_extend[:T].copy_(new.v_extend)
        slots = new.k_buffer.shape[0]
        assert slots <= cap.k_buffer.shape[0]
        cap.k_buffer[:slots].copy_(new.k_buffer)
        lengths = list(case.ctx) + [1] * (bs_cap - bs)           # padded requests
        kv = torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist(), device=device)
        cap.kv_indptr.copy_(kv.to(cap.kv_indptr.dtype))
        cap.kv_indices[:new.kv_indices.numel()].copy_(new.kv_indices)
        cap.kv_indices[new.kv_indices.numel():].zero_()           # padding reads slot 0
        mask = torch.ones(self.mask_capacity, dtype=cap.custom_mask.dtype, device=device)
        mask[:new.custom_mask.numel()].copy_(new.custom_mask.to(cap.custom_mask.dtype))
        cap.custom_mask.copy_(mask)
        starts = [0]
        for p in lengths:
            starts.append(starts[-1] + n * (p + n))
        cap.mask_indptr.copy_(torch.tensor(starts, device=device))


def replays_match_eager(candidate, device, capacity: VerifyCase, steps) -> tuple[bool, str]:
    """Capture ``candidate`` once at ``capacity``, then for each of ``steps`` (loaded into the
    same static buffers) compare a replay with an eager call, bitwise, on the step's real rows;
    a real row the replay left unwritten (NaN) fails too. (True, "ok"), or (False, what failed
    first)."""
    batch = StaticBatch(device, capacity)
    args, kwargs = batch.inputs.call_args(batch.o)
    candidate(*args, **kwargs)  # warm-up: one-time setup happens outside capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        candidate(*args, **kwargs)
    for step in steps:
        batch.load(step, device)
        batch.o.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        replayed = batch.o.clone()
        batch.o.fill_(float("nan"))
        candidate(*args, **kwargs)
        torch.cuda.synchronize()
        rows = len(step.ctx) * step.n
        if torch.isnan(replayed[:rows].float()).any():
            return False, f"{step.id}: the replay left rows unwritten"
        bad = int((replayed[:rows].view(torch.int16) != batch.o[:rows].view(torch.int16)).sum())
        if bad:
            return False, f"{step.id}: replay differs from eager in {bad} elements"
    return True, "ok"


def replay_matches_eager(candidate, device, seed: int = 0, boundary: bool = False) -> tuple[bool, str]:
    """replays_match_eager() at CAPACITY for two new batches (boundary-dominant drafts if
    asked)."""
    steps = [VerifyCase(ctx=(100, 5000), n=16, heads=8, tree="topk", indptr_dtype="int64",
                        mask_dtype="uint8", seed=seed + 1, boundary=boundary),
             VerifyCase(ctx=(4000, 0, 37), n=16, heads=8, tree="star", indptr_dtype="int64",
                        mask_dtype="uint8", seed=seed + 2, boundary=boundary)]
    return replays_match_eager(candidate, device, CAPACITY, steps)
