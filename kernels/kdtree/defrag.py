"""Tier-0 defrag: make SGLang's token allocators keep freed slots for a sorted merge.

With ``need_sort=True`` SGLang's allocators stage freed slots and, whenever the front of
the free list runs short, merge and sort all free slots, so new requests get ascending,
mostly contiguous slots instead of whatever was freed last. A normal (non-disaggregated)
server builds its allocator with ``need_sort=False``; this AFTER hook on the allocators'
``__init__`` flips it and checks that it took.
"""

from __future__ import annotations

from pathlib import Path

from kdtree.coverage_emitter import emit, make_record

HOOK_NAME = "defrag-sort"
TARGETS = (
    "sglang.srt.mem_cache.allocator.token.TokenToKVPoolAllocator.__init__",
    "sglang.srt.mem_cache.allocator.paged.PagedTokenToKVPoolAllocator.__init__",
)


class DefragNotEffective(RuntimeError):
    """Raised under KDTREE_STRICT=1 when an allocator did not keep need_sort=True."""


def need_sort_problem(allocator) -> str | None:
    """Why ``allocator`` would not sort its free list (None when it will)."""
    if getattr(allocator, "need_sort", None) is not True:
        return f"need_sort is {getattr(allocator, 'need_sort', '<missing>')!r} after the hook"
    staging = "staged_pages" if hasattr(allocator, "staged_pages") else "release_pages"
    if getattr(allocator, staging, None) is None:
        return f"{type(allocator).__name__} has no {staging} to stage frees in"
    return None


class DefragSortHook:
    """AFTER hook ``(result, allocator, *args, **kwargs)``. One instance per registration:
    it reports ``effective`` once per process (the first allocator it fixes) and
    ``failed`` once, at the first allocator it could not fix."""

    def __init__(self, strict: bool, status_dir: Path | None):
        self.strict = strict
        self.status_dir = status_dir
        self._effective_reported = False
        self._failure_reported = False

    def __call__(self, result, allocator, *args, **kwargs):
        try:
            allocator.need_sort = True
        except Exception as exc:  # a subclass that made need_sort read-only
            problem = f"cannot set need_sort: {exc!r}"
        else:
            problem = need_sort_problem(allocator)
        name = f"{type(allocator).__name__}(size={getattr(allocator, 'size', '?')}, " \
               f"page_size={getattr(allocator, 'page_size', '?')})"
        if problem is None:
            if not self._effective_reported:
                self._effective_reported = True
                emit(make_record("effective", HOOK_NAME, f"need_sort=True on {name}"),
                     self.status_dir)
            return None
        if not self._failure_reported:
            self._failure_reported = True
            emit(make_record("failed", HOOK_NAME, f"{name}: {problem}"), self.status_dir)
        if self.strict:
            raise DefragNotEffective(f"kdtree defrag-sort did not take on {name}: {problem}")
        return None
