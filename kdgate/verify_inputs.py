"""Synthetic verify-attention inputs with realistic structure, in SGLang's layout.

Each case is a batch of requests (prefix lengths ``ctx``, ``n`` draft tokens each, a
draft tree of one shape), laid out exactly as SGLang's MLA target-verify hands it to
``extend_attention_fwd``: q [T, H, 576], k_extend/v_extend, a token-major k_buffer with
slot 0 reserved and v_buffer = k_buffer[..., :512], qo/kv indptrs, int64 kv_indices, and
the flat FULL_MASK tree mask (per request [n, P+n], prefix columns set) with mask_indptr.

Structure: a strong attention sink (prefix token 0 aligned with every query), a few
outlier channels, and optionally "boundary-dominant" drafts whose keys align with the
queries so strongly that including or dropping any one draft key moves the output far
beyond one ULP (an off-by-one in the mask cannot hide under tolerance), and optionally one
such key late in each prefix (``prefix_jump``: position ctx - 10), where the scores jump.
``value_scale`` (a power of two) scales every V by it and q's first 512 dims by its inverse:
the same scores exactly, outputs of another magnitude.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

HEAD_DIM, VALUE_DIM = 576, 512
TREES = ("chain", "star", "random", "topk")


@dataclass(frozen=True)
class VerifyCase:
    ctx: tuple[int, ...]          # prefix length of each request
    n: int                        # draft tokens per request (max_len_extend)
    heads: int
    tree: str = "random"
    fragmented: bool = True       # prefix slots scattered over the pool, else consecutive
    indptr_dtype: str = "int32"   # qo_indptr / kv_indptr: int32 (eager) or int64 (graph)
    mask_dtype: str = "bool"      # bool | uint8 | none (chains only: is_causal, no mask)
    boundary: bool = False
    prefix_jump: bool = False     # prefix position ctx - 10 of each request aligned with its queries
    seed: int = 0
    sm_scale: float = 192 ** -0.5
    value_scale: float = 1.0      # a power of two: V x it, q's first 512 dims / it

    def __post_init__(self):
        mantissa, _ = math.frexp(self.value_scale) if self.value_scale > 0 else (0.0, 0)
        if mantissa != 0.5 or not 2.0 ** -60 <= self.value_scale <= 2.0 ** 60:
            raise ValueError(f"value_scale must be a power of two in [2^-60, 2^60], got {self.value_scale!r}")
        if self.tree not in TREES:
            raise ValueError(f"tree must be one of {TREES}, got {self.tree!r}")
        if self.mask_dtype == "none" and self.tree != "chain":
            raise ValueError("mask_dtype 'none' is for chains only")

    @property
    def id(self) -> str:
        ctx = ",".join(map(str, self.ctx)) if len(self.ctx) <= 3 else f"{len(self.ctx)}mixed"
        bits = [f"ctx{ctx}", f"n{self.n}", f"h{self.heads}", self.tree,
                "frag" if self.fragmented else "contig", self.indptr_dtype, self.mask_dtype]
        if self.boundary:
            bits.append("boundary")
        if self.prefix_jump:
            bits.append("jump")
        if self.value_scale != 1.0:
            bits.append(f"v2^{int(math.log2(self.value_scale))}")
        return "-".join(bits)


def tree_parents(tree: str, n: int, gen: torch.Generator) -> list[int]:
    """Parent of each draft (-1 for the root); every parent index is smaller than its child."""
    if tree == "chain":
        return [-1] + list(range(n - 1))
    if tree == "star":
        return [-1] + [0] * (n - 1)
    if tree == "topk":
        return [-1] + [(i - 1) // 4 for i in range(1, n)]
    return [-1] + [int(torch.randint(0, i, (1,), generator=gen)) for i in range(1, n)]


def ancestor_mask(parents: list[int]) -> torch.Tensor:
    """[n, n] bool: row i sees draft j iff j is i or an ancestor of i."""
    n = len(parents)
    mask = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        j = i
        while j >= 0:
            mask[i, j] = True
            j = parents[j]
    return mask


@dataclass
class VerifyInputs:
    case: VerifyCase
    q: torch.Tensor
    k_extend: torch.Tensor
    v_extend: torch.Tensor
    k_buffer: torch.Tensor
    qo_indptr: torch.Tensor
    kv_indptr: torch.Tensor
    kv_indices: torch.Tensor
    custom_mask: torch.Tensor | None
    mask_indptr: torch.Tensor | None
    parents: list[list[int]] = field(default_factory=list)

    @property
    def v_buffer(self) -> torch.Tensor:
        return self.k_buffer[..., :VALUE_DIM]

    def new_output(self, poison: float = float("nan")) -> torch.Tensor:
        """An output tensor pre-filled with ``poison`` so unwritten elements show."""
        T, H = self.q.shape[:2]
        return torch.full((T, H, VALUE_DIM), poison, dtype=torch.bfloat16, device=self.q.device)

    def call_args(self, o: torch.Tensor, lse: torch.Tensor | None = None) -> tuple[tuple, dict]:
        """(args, kwargs) in extend_attention_fwd's form, as SGLang's verify path passes them."""
        args = (self.q, self.k_extend, self.v_extend, o, self.k_buffer, self.v_buffer,
                self.qo_indptr, self.kv_indptr, self.kv_indices, self.custom_mask, True,
                self.mask_indptr, self.case.n, 1.0, 1.0)
        kwargs = dict(sm_scale=self.case.sm_scale)
        if lse is not None:
            kwargs["lse_extend"] = lse
        return args, kwargs

    def reference_args(self) -> tuple:
        return (self.q, self.k_extend, self.v_extend, self.k_buffer, self.qo_indptr,
                self.kv_indptr, self.kv_indices, self.custom_mask, self.mask_indptr,
                self.case.sm_scale)


def build_inputs(case: VerifyCase, device: str | torch.device = "cuda") -> VerifyInputs:
    gen = torch.Generator().manual_seed(case.seed)
    bs, n, H = len(case.ctx), case.n, case.heads
    T = bs * n
    total_prefix = sum(case.ctx)

    def randn(*shape, scale=1.0):
        return torch.randn(*shape, generator=gen) * scale

    q = randn(T, H, HEAD_DIM)
    outliers = torch.randperm(HEAD_DIM, generator=gen)[:8]
    q[..., outliers] *= 6.0
    keys = randn(total_prefix + 1, HEAD_DIM)          # row 0: the padding slot
    keys[:, outliers] *= 4.0
    draft_k = randn(T, HEAD_DIM)
    draft_k[:, outliers] *= 4.0
    draft_v = randn(T, VALUE_DIM)

    # attention sink: each request's first prefix token aligned with its queries; with
    # prefix_jump also its token ctx - 10, as strongly as a boundary draft (scores jump there)
    offset = 1
    for b, p in enumerate(case.ctx):
        if p:
            direction = q[b * n:(b + 1) * n].mean(dim=(0, 1))
            keys[offset] = 3.0 * direction / direction.norm() * HEAD_DIM ** 0.5
            if case.prefix_jump and p > 10:
                keys[offset + p - 10] = 6.0 * direction / direction.norm() * HEAD_DIM ** 0.5
        offset += p
    if case.boundary:
        for b in range(bs):
            rows = slice(b * n, (b + 1) * n)
            direction = q[rows].mean(dim=(0, 1))
            draft_k[rows] = 6.0 * direction / direction.norm() * HEAD_DIM ** 0.5 + 0.5 * draft_k[rows]

    if case.value_scale != 1.0:  # powers of two: every product q.k, so every score, unchanged
        keys[:, :VALUE_DIM] *= case.value_scale
        draft_k[:, :VALUE_DIM] *= case.value_scale
        draft_v *= case.value_scale
        q[..., :VALUE_DIM] /= case.value_scale

    pool = total_prefix + 1 + 64                       # a few never-used slots at the end
    if case.fragmented:
        slot_of = (torch.randperm(pool - 1, generator=gen) + 1)[:total_prefix]
    else:
        slot_of = torch.arange(1, total_prefix + 1)
    k_buffer = torch.zeros(pool, 1, HEAD_DIM)
    k_buffer[slot_of, 0] = keys[1:]

    qo = torch.arange(0, T + 1, n)
    kv = torch.tensor([0] + list(torch.tensor(case.ctx).cumsum(0).tolist())) if bs else torch.zeros(1)
    index_dtype = {"int32": torch.int32, "int64": torch.int64}[case.indptr_dtype]

    parents_all, blocks, mask_starts = [], [], [0]
    for b, p in enumerate(case.ctx):
        parents = tree_parents(case.tree, n, gen)
        parents_all.append(parents)
        block = torch.ones(n, p + n, dtype=torch.bool)
        block[:, p:] = ancestor_mask(parents)
        blocks.append(block.reshape(-1))
        mask_starts.append(mask_starts[-1] + n * (p + n))
    if case.mask_dtype == "none":
        custom_mask = mask_indptr = None
    else:
        mask_dtype = torch.bool if case.mask_dtype == "bool" else torch.uint8
        custom_mask = torch.cat(blocks).to(mask_dtype).to(device)
        mask_indptr = torch.tensor(mask_starts, dtype=torch.int64, device=device)

    bf16 = torch.bfloat16
    return VerifyInputs(
        case=case,
        q=q.to(bf16).to(device),
        k_extend=draft_k.to(bf16).reshape(T, 1, HEAD_DIM).to(device),
        v_extend=draft_v.to(bf16).reshape(T, 1, VALUE_DIM).to(device),
        k_buffer=k_buffer.to(bf16).to(device),
        qo_indptr=qo.to(index_dtype).to(device),
        kv_indptr=kv.to(index_dtype).to(device),
        kv_indices=slot_of.to(torch.int64).to(device),
        custom_mask=custom_mask, mask_indptr=mask_indptr, parents=parents_all,
    )
