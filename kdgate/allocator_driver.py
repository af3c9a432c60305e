"""Serving-like calls on one real SGLang token allocator, with an independent ledger.

The driver calls the allocator the way SGLang's scheduler does (prefill: ``alloc`` or
``alloc_extend``; decode: one token per running request, ``alloc`` or ``alloc_decode``;
finish/abort: ``free``) and keeps its own record of which slots each live request holds,
so the allocator's answers can be checked against it (:meth:`check_invariants`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


class AllocatorInvariantError(AssertionError):
    """The allocator broke one of its invariants; the message says which and where."""


def allocator_device() -> str:
    """Where the allocator lives: on a CUDA host SGLang's paged allocator runs Triton
    kernels on device tensors (its production path), elsewhere its torch fallbacks on CPU."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def make_allocator(page_size: int, pool_tokens: int):
    """Build SGLang's allocator for this page size exactly as a normal (non-disaggregated)
    server does: ``TokenToKVPoolAllocator`` for page size 1, else
    ``PagedTokenToKVPoolAllocator``, both with ``need_sort=False`` passed by keyword.
    Plugin hooks already applied by ``load_plugins()`` run inside the constructor."""
    from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
    from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator

    if page_size < 1 or pool_tokens < page_size:
        raise ValueError(f"page_size must be >= 1 and pool_tokens >= page_size, "
                         f"got page_size={page_size}, pool_tokens={pool_tokens}")
    common = dict(dtype=torch.bfloat16, device=allocator_device(), kvcache=None, need_sort=False)
    if page_size == 1:
        return TokenToKVPoolAllocator(pool_tokens, **common)
    return PagedTokenToKVPoolAllocator(pool_tokens, page_size=page_size, **common)


@dataclass
class _Request:
    prompt: torch.Tensor                                 # the prefill's slots
    decoded: list[int] = field(default_factory=list)     # one slot per decode step

    @property
    def length(self) -> int:
        return self.prompt.numel() + len(self.decoded)

    @property
    def last_slot(self) -> int:
        return self.decoded[-1] if self.decoded else int(self.prompt[-1])

    def slots(self) -> torch.Tensor:
        return torch.cat((self.prompt, torch.tensor(self.decoded, dtype=torch.int64)))


class AllocatorDriver:
    """Wraps one allocator. Request ids are the caller's; every method that allocates
    returns the new slots (or None when the allocator says the pool is short)."""

    def __init__(self, allocator):
        self.allocator = allocator
        self.device = torch.device(getattr(allocator, "device", "cpu"))
        self.page_size = int(allocator.page_size)
        self.capacity = (int(allocator.size) // self.page_size) * self.page_size
        self.requests: dict[int, _Request] = {}
        self.in_use = torch.zeros(self.capacity + self.page_size, dtype=torch.bool)
        self.calls = 0

    # -- serving calls -----------------------------------------------------------------
    def prefill(self, rid: int, tokens: int) -> torch.Tensor | None:
        """A new request's prompt: ``tokens`` slots."""
        if rid in self.requests:
            raise ValueError(f"request {rid} is already live")
        if tokens < 1:
            raise ValueError(f"tokens must be >= 1, got {tokens}")
        self.calls += 1
        if self.page_size == 1:
            slots = self.allocator.alloc(tokens)
        else:
            # (prefix_lens, prefix_lens_cpu, seq_lens, seq_lens_cpu, last_loc, tokens): the
            # *_cpu arguments are host tensors, the others live on the allocator's device
            zero, seq = torch.tensor([0]), torch.tensor([tokens])
            on = self.device
            slots = self.allocator.alloc_extend(zero.to(on), zero, seq.to(on), seq,
                                                torch.tensor([-1], device=on), tokens)
        if slots is None:
            return None
        slots = slots.cpu()
        self._take(slots)
        self.requests[rid] = _Request(slots.clone())
        return slots

    def decode(self, rids: list[int]) -> torch.Tensor | None:
        """One decode step: one new slot for each request in ``rids``, in that order."""
        if not rids:
            return torch.empty(0, dtype=torch.int64)
        reqs = [self.requests[r] for r in rids]
        self.calls += 1
        if self.page_size == 1:
            slots = self.allocator.alloc(len(rids))
        else:
            seq = torch.tensor([r.length + 1 for r in reqs])
            last = torch.tensor([r.last_slot for r in reqs], device=self.device)
            slots = self.allocator.alloc_decode(seq.to(self.device), seq, last)
        if slots is None:
            return None
        slots = slots.cpu()
        self._take(slots)
        for req, slot in zip(reqs, slots.tolist()):
            req.decoded.append(slot)
        return slots

    def release(self, rid: int) -> None:
        """Finish or abort: free every slot the request holds."""
        req = self.requests.pop(rid)
        slots = req.slots()
        self.calls += 1
        self.in_use[slots] = False
        self.allocator.free(slots.to(self.device))

    # -- checks ------------------------------------------------------------------------
    def _take(self, slots: torch.Tensor) -> None:
        if slots.numel() and int(slots.min()) < self.page_size:
            raise AllocatorInvariantError(
                f"handed out reserved slot(s) {slots[slots < self.page_size][:8].tolist()} "
                f"(slot 0 / page 0 is the padding slot)")
        if slots.numel() and int(slots.max()) >= self.capacity + self.page_size:
            raise AllocatorInvariantError(f"handed out slot {int(slots.max())} beyond the pool")
        if torch.unique(slots).numel() != slots.numel():
            raise AllocatorInvariantError("one allocation holds the same slot twice")
        clash = self.in_use[slots]
        if bool(clash.any()):
            raise AllocatorInvariantError(
                f"handed out slot(s) {slots[clash][:8].tolist()} that a live request holds")
        self.in_use[slots] = True

    def live_tokens(self) -> int:
        return int(self.in_use.sum())

    def live_pages(self) -> int:
        return int(self.in_use.view(-1, self.page_size).any(dim=1).sum())

    def check_invariants(self) -> None:
        """live + available == capacity (in pages of the allocator's page size), and with
        nothing live the whole pool is available. Raises AllocatorInvariantError."""
        available = int(self.allocator.available_size())
        live = self.live_pages() * self.page_size
        if live + available != self.capacity:
            raise AllocatorInvariantError(
                f"live {live} + available {available} != capacity {self.capacity} "
                f"(page_size {self.page_size}, {len(self.requests)} live requests)")
        if not self.requests and available != self.capacity:
            raise AllocatorInvariantError(
                f"all requests freed but only {available} of {self.capacity} available")
