"""Speculative acceptance as servers report it, and the live layer's check on it.

A wrong verify kernel rejects good drafts before it changes any text, so the mean
acceptance over the canonical prompts must not drop more than a stated margin below the
stored snapshot's. What is averaged, per server:

* SGLang (``/generate`` meta_info): ``spec_accept_length``, accepted tokens per verify
  step, weighted by ``spec_verify_ct`` (the verify steps of that request);
* llama-server (``timings``): ``draft_n_accepted / draft_n``, the share of drafted tokens
  accepted, pooled over requests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True)
class Acceptance:
    value: float        # the pooled mean (see the module docstring)
    measure: str        # "accept length" or "draft acceptance rate"
    requests: int       # requests that reported speculation


def pooled_acceptance(metas: Iterable[dict]) -> Acceptance | None:
    """The pooled acceptance over requests' speculative statistics; None when no request
    reports any (the server does not speculate)."""
    length_sum = steps = drafted = accepted = 0.0
    sglang = llama = 0
    for meta in metas:
        if meta.get("spec_accept_length") is not None and meta.get("spec_verify_ct"):
            length_sum += float(meta["spec_accept_length"]) * float(meta["spec_verify_ct"])
            steps += float(meta["spec_verify_ct"])
            sglang += 1
        elif meta.get("draft_n"):
            drafted += float(meta["draft_n"])
            accepted += float(meta.get("draft_n_accepted", 0))
            llama += 1
    if sglang:
        return Acceptance(length_sum / steps, "accept length", sglang)
    if llama:
        return Acceptance(accepted / drafted, "draft acceptance rate", llama)
    return None


def acceptance_problem(stored: Acceptance | None, live: Acceptance | None, margin: float) -> str | None:
    """Why ``live`` fails against ``stored`` (None: it holds). ``margin`` is the largest
    allowed relative drop (0.10: live may be 10 % below the snapshot)."""
    if stored is None:
        return None
    if live is None:
        return (f"the snapshot's server speculated ({stored.measure} {stored.value:.3f} over "
                f"{stored.requests} requests); this one reports no speculation")
    if live.measure != stored.measure:
        return f"the snapshot reports {stored.measure}, this server {live.measure}"
    floor = stored.value * (1.0 - margin)
    if live.value < floor:
        return (f"mean {live.measure} {live.value:.3f} is below the snapshot's {stored.value:.3f} "
                f"by more than {margin:.0%} (floor {floor:.3f})")
    return None
