"""The benchmark's cases: which shapes are timed, named so runs and baselines line up.

A case is a batch of ``bs`` requests with prefix ``ctx`` tokens each (or, when ``mixed``,
lengths drawn around that mean), ``n`` draft tokens per request in a ``chain`` or a
``tree``, ``heads`` local query heads, prefix slots in randomly permuted pages of
``page_size`` tokens. Matrices:

* ``full``: issue #7's matrix (H 8, 16, spot 128; N 1..64; chain/tree; ctx 1k..128k plus
  mixed batches; bs 1..128), cells over ``MAX_KV_BYTES`` of KV left out.
* ``ci``: the subset ``pytest -m perf`` checks against the committed baseline.
* ``smoke``: three small cases, for trying the command.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

SHAPES = ("chain", "tree")
MAX_KV_BYTES = 24 << 30
K = 1024


@dataclass(frozen=True)
class PerfCase:
    bs: int
    ctx: int                 # prefix tokens per request (the mean when mixed)
    n: int                   # draft tokens per request
    heads: int
    shape: str = "tree"      # chain | tree
    mixed: bool = False      # lengths ~ normal(ctx, ctx/2), clipped to [1, 2 ctx]
    page_size: int = 64

    def __post_init__(self):
        for name in ("bs", "ctx", "n", "heads", "page_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.shape not in SHAPES:
            raise ValueError(f"shape must be one of {SHAPES}, got {self.shape!r}")
        if self.n > 64:
            raise ValueError(f"n must be at most 64 (the kernel's max_len_extend), got {self.n}")

    @property
    def id(self) -> str:
        ctx = f"{self.ctx // K}k" if self.ctx % K == 0 else str(self.ctx)
        return (f"bs{self.bs}-ctx{ctx}{'mixed' if self.mixed else ''}-n{self.n}-h{self.heads}"
                f"-{self.shape}-p{self.page_size}")

    def kv_bytes(self) -> int:
        return self.bs * (self.ctx * (2 if self.mixed else 1) + self.n) * 1152

    def as_dict(self) -> dict:
        return asdict(self)


def _full() -> list[PerfCase]:
    cases = []
    contexts = (1 * K, 4 * K, 16 * K, 64 * K, 128 * K)
    for heads in (8, 16):                        # batch 1: every N, every context, trees
        for n in (1, 2, 4, 8, 16, 32, 64):
            for ctx in contexts:
                cases.append(PerfCase(1, ctx, n, heads, "tree" if n > 1 else "chain"))
        for n in (2, 4, 8):                      # chains: SGLang's split-KV chain kernel
            for ctx in contexts:
                cases.append(PerfCase(1, ctx, n, heads, "chain"))
    for bs in (4, 8, 32, 128):                   # batches
        for ctx in (4 * K, 16 * K, 64 * K):
            for n, heads, shape in ((16, 8, "tree"), (8, 16, "tree"), (4, 16, "chain")):
                cases.append(PerfCase(bs, ctx, n, heads, shape))
    for bs, ctx in ((32, 16 * K), (8, 64 * K)):  # mixed lengths
        for n, heads, shape in ((16, 8, "tree"), (4, 16, "chain")):
            cases.append(PerfCase(bs, ctx, n, heads, shape, mixed=True))
    for bs in (1, 32):                           # spot: 128 heads (TP1)
        for n in (1, 2, 4):
            cases.append(PerfCase(bs, 16 * K, n, 128, "chain"))
    return [c for c in cases if c.kv_bytes() <= MAX_KV_BYTES]


def _ci() -> list[PerfCase]:
    cases = []
    for heads in (8, 16):
        for n in (4, 8, 32, 64):
            for ctx in (4 * K, 32 * K, 128 * K):
                cases.append(PerfCase(1, ctx, n, heads, "chain" if n == 4 else "tree"))
    for ctx in (4 * K, 16 * K):
        cases.append(PerfCase(128, ctx, 4, 16, "chain"))
        cases.append(PerfCase(32, ctx, 16, 8, "tree"))
    cases.append(PerfCase(32, 16 * K, 16, 8, "tree", mixed=True))
    return cases


def _smoke() -> list[PerfCase]:
    return [PerfCase(1, 4 * K, 8, 8, "tree"), PerfCase(1, 16 * K, 4, 16, "chain"),
            PerfCase(4, 4 * K, 16, 8, "tree", mixed=True)]


MATRICES = {"full": _full, "ci": _ci, "smoke": _smoke}


def matrix(name: str) -> list[PerfCase]:
    """The cases of a named matrix (see the module docstring)."""
    if name not in MATRICES:
        raise ValueError(f"matrix must be one of {sorted(MATRICES)}, got {name!r}")
    return MATRICES[name]()
