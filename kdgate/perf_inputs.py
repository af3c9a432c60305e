"""Benchmark inputs built on the GPU, in SGLang's verify layout, for any matrix cell.

Follows FlashMLA's benchmark conventions: prefix slots in randomly permuted pages of
``page_size`` tokens (slot 0 reserved), every slot no request owns filled with NaN (a
stray read shows in the output), values standard normal, mixed batches with lengths
drawn from normal(mean, mean/2). Built on the device in bf16, so a 19 GB KV pool needs
no host copy. Returns :class:`kdgate.verify_inputs.VerifyInputs`, the layout every
kernel call in this project takes.
"""

from __future__ import annotations

import torch

from kdgate.perf_matrix import PerfCase
from kdgate.verify_inputs import HEAD_DIM, VALUE_DIM, VerifyCase, VerifyInputs, ancestor_mask, tree_parents


def request_lengths(case: PerfCase, seed: int = 0) -> list[int]:
    """Prefix length of each request: ``ctx`` each, or normal(ctx, ctx/2) in [1, 2 ctx]."""
    if not case.mixed:
        return [case.ctx] * case.bs
    gen = torch.Generator().manual_seed(seed)
    draws = torch.randn(case.bs, generator=gen) * (case.ctx / 2) + case.ctx
    return [int(min(max(round(float(x)), 1), 2 * case.ctx)) for x in draws]


def paged_slots(lengths: list[int], page_size: int, gen: torch.Generator) -> tuple[torch.Tensor, int]:
    """(kv_indices on the host, pool size in slots): each request's prefix in whole pages,
    pages randomly permuted over the pool, page 0 (holding the reserved slot 0) unused."""
    pages_of = [-(-p // page_size) for p in lengths]
    total_pages = sum(pages_of)
    order = torch.randperm(total_pages, generator=gen) + 1
    within = torch.arange(page_size)
    indices, start = [], 0
    for p, count in zip(lengths, pages_of):
        pages = order[start:start + count]
        start += count
        indices.append((pages[:, None] * page_size + within).reshape(-1)[:p])
    flat = torch.cat(indices) if indices else torch.zeros(0, dtype=torch.int64)
    return flat.to(torch.int64), (total_pages + 1) * page_size


def build_perf_inputs(case: PerfCase, device: str | torch.device = "cuda", seed: int = 0,
                      lengths_seed: int | None = None) -> VerifyInputs:
    """One call's inputs for ``case`` on ``device`` (bf16; int32 indptrs, bool tree mask):
    values and slots from ``seed``, a mixed batch's lengths from ``lengths_seed`` (default:
    ``seed``), so input sets of one call's shape can differ in their data alone."""
    host = torch.Generator().manual_seed(seed)
    dev = torch.Generator(device=device).manual_seed(seed)
    lengths = request_lengths(case, seed if lengths_seed is None else lengths_seed)
    bs, n, H = case.bs, case.n, case.heads
    T = bs * n
    kv_indices, pool = paged_slots(lengths, case.page_size, host)

    def randn(*shape):
        return torch.randn(*shape, generator=dev, device=device, dtype=torch.bfloat16)

    k_buffer = randn(pool, 1, HEAD_DIM)
    used = torch.zeros(pool, dtype=torch.bool, device=device)
    kv_dev = kv_indices.to(device)
    used[kv_dev] = True
    k_buffer[~used] = float("nan")

    blocks, starts, parents_all = [], [0], []
    for p in lengths:
        parents = tree_parents("chain" if case.shape == "chain" else "random", n, host)
        parents_all.append(parents)
        block = torch.ones(n, p + n, dtype=torch.bool, device=device)
        block[:, p:] = ancestor_mask(parents).to(device)
        blocks.append(block.reshape(-1))
        starts.append(starts[-1] + n * (p + n))
    kv_indptr = torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist(), dtype=torch.int32)
    return VerifyInputs(
        case=VerifyCase(ctx=tuple(lengths), n=n, heads=H,
                        tree="chain" if case.shape == "chain" else "random", seed=seed),
        q=randn(T, H, HEAD_DIM),
        k_extend=randn(T, 1, HEAD_DIM),
        v_extend=randn(T, 1, VALUE_DIM),
        k_buffer=k_buffer,
        qo_indptr=torch.arange(0, T + 1, n, dtype=torch.int32).to(device),
        kv_indptr=kv_indptr.to(device),
        kv_indices=kv_dev,
        custom_mask=torch.cat(blocks),
        mask_indptr=torch.tensor(starts, dtype=torch.int64, device=device),
        parents=parents_all,
    )
