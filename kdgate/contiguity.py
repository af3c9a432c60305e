"""How contiguous the KV slots handed to requests are.

A request's slots form *runs*: maximal stretches of consecutive slot numbers in the
order the request holds them. One run means the request's KV is one contiguous block.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch


def runs_in(slots: torch.Tensor) -> int:
    """Number of maximal ascending-by-one stretches in ``slots`` (0 for no slots)."""
    if slots.numel() == 0:
        return 0
    return 1 + int((slots[1:] - slots[:-1] != 1).sum())


@dataclass(frozen=True)
class Contiguity:
    requests: int
    tokens: int
    runs: int
    runs_per_request: float
    runs_per_1k_tokens: float
    single_run_share: float

    def as_dict(self) -> dict:
        return asdict(self)


def measure_contiguity(allocations: list[torch.Tensor]) -> Contiguity:
    """Contiguity of a list of allocations (one slot tensor per request)."""
    if not allocations:
        raise ValueError("allocations must hold at least one request's slots")
    runs = [runs_in(a) for a in allocations]
    tokens = sum(int(a.numel()) for a in allocations)
    return Contiguity(
        requests=len(allocations), tokens=tokens, runs=sum(runs),
        runs_per_request=sum(runs) / len(runs),
        runs_per_1k_tokens=1000.0 * sum(runs) / tokens,
        single_run_share=sum(1 for r in runs if r == 1) / len(runs),
    )


def improvement_problem(patched: Contiguity, unpatched: Contiguity,
                        min_runs_ratio: float) -> str | None:
    """The defrag patch's promise as one check: the patched arm's allocations have at
    least ``min_runs_ratio``× fewer runs per 1k tokens than the unpatched arm's.
    Returns the reason it does not hold, or None."""
    ratio = unpatched.runs_per_1k_tokens / max(patched.runs_per_1k_tokens, 1e-12)
    if ratio < min_runs_ratio:
        return (f"runs per 1k tokens {patched.runs_per_1k_tokens:.3f} patched vs "
                f"{unpatched.runs_per_1k_tokens:.3f} unpatched: {ratio:.2f}x fewer, "
                f"need >= {min_runs_ratio:g}x")
    return None
