"""Deliberately broken subclasses of SGLang's real allocators: the negative controls
that prove the invariant checks can fail. Each breaks exactly one promise."""

from __future__ import annotations

import torch
from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator


class DoubleFreeTokenAllocator(TokenToKVPoolAllocator):
    """On free, puts the first freed slot back twice (and forgets the last one, so the
    counts still add up): that slot is later handed out while a request holds it."""

    def free(self, free_index: torch.Tensor):
        if free_index.numel() > 1:
            free_index = free_index.clone()
            free_index[-1] = free_index[0]
        super().free(free_index)


class PaddingSlotTokenAllocator(TokenToKVPoolAllocator):
    """Puts the reserved padding slot 0 at the front of the free list (in place of the
    last slot, so the counts still add up)."""

    def clear(self):
        super().clear()
        self.free_pages = torch.cat((torch.zeros(1, dtype=torch.int64, device=self.free_pages.device),
                                     self.free_pages[:-1]))


class LeakyPagedAllocator(PagedTokenToKVPoolAllocator):
    """Drops one page of every free: capacity leaks away."""

    def free(self, free_index: torch.Tensor):
        pages = torch.unique(free_index // self.page_size)
        if pages.numel() > 1:
            keep = pages[1:] * self.page_size
            super().free((keep[:, None] + torch.arange(self.page_size, device=keep.device)).reshape(-1))


FAULTS = {
    "double-free": DoubleFreeTokenAllocator,
    "padding-slot": PaddingSlotTokenAllocator,
    "leaky-pages": LeakyPagedAllocator,
}


def make_faulty_allocator(fault: str, page_size: int, pool_tokens: int):
    """Construct the named broken allocator with a server's arguments."""
    if fault not in FAULTS:
        raise ValueError(f"fault must be one of {sorted(FAULTS)}, got {fault!r}")
    cls = FAULTS[fault]
    from kdgate.allocator_driver import allocator_device

    common = dict(dtype=torch.bfloat16, device=allocator_device(), kvcache=None, need_sort=False)
    if issubclass(cls, PagedTokenToKVPoolAllocator):
        return cls(pool_tokens, page_size=page_size, **common)
    return cls(pool_tokens, **common)
