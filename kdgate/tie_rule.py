"""The tie-aware comparison of a live greedy generation with a stored one (docs/DESIGN.md).

Greedy generations may legitimately split after a near-tie (bf16 noise). Token by token:

* before the first differing token: every token equal and |Δ logprob| < 0.5;
* at the first difference: pass only if it is a near-tie in BOTH runs: in each run the
  gap between its own token and the other run's token is at most ε (the other token must
  be in that run's top list; ε default 0.10 nats, clamped to [0.05, 0.25]);
* after it: the stored continuation, re-scored by the server (prompt + stored output),
  must keep each stored token within 1.0 nats of the server's top choice there; gaps over
  0.25 nats are listed in the report as drift.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from kdgate.live_client import TokenStep

EPS_DEFAULT, EPS_MIN, EPS_MAX = 0.10, 0.05, 0.25
PREFIX_LOGPROB_TOL = 0.5
DRIFT, RESCORE_FAIL = 0.25, 1.0


def clamp_eps(eps: float) -> float:
    return min(EPS_MAX, max(EPS_MIN, float(eps)))


def _logprob_of(step: TokenStep, key) -> float | None:
    if step.key() == key:
        return step.logprob
    for tid, text, lp in step.top:
        if (tid if tid is not None else text) == key:
            return lp
    return None


def _top_text(step: TokenStep) -> str:
    return ", ".join(f"{text!r}({'' if tid is None else tid}) {lp:.3f}" for tid, text, lp in step.top[:5])


@dataclass
class TieVerdict:
    passed: bool
    reason: str
    first_divergence: int | None = None
    stored_gap: float | None = None
    live_gap: float | None = None
    detail: list[str] = field(default_factory=list)
    drift: list[tuple[int, float]] = field(default_factory=list)
    rescored_worst: float | None = None   # worst re-scoring gap after a near-tie split

    def figures(self, test: str, prompt: str, tokens: int) -> dict:
        """Plain JSON values for the nightly report's divergence picture."""
        def finite(x):
            return None if x is None or x != x or x in (float("inf"), float("-inf")) else x
        return {"kind": "tie-verdict", "test": test, "prompt": prompt, "tokens": tokens,
                "passed": self.passed, "first_divergence": self.first_divergence,
                "stored_gap": finite(self.stored_gap), "live_gap": finite(self.live_gap),
                "rescored_worst": finite(self.rescored_worst)}

    def report(self) -> str:
        head = f"tie rule {'PASS' if self.passed else 'FAIL'}: {self.reason}"
        return "\n".join([head, *("  " + d for d in self.detail)])


def compare_generations(stored: Sequence[TokenStep], live: Sequence[TokenStep], eps: float = EPS_DEFAULT,
                        rescore: Callable[[int], list[float]] | None = None) -> TieVerdict:
    """Judge ``live`` against ``stored``. ``rescore(k)`` returns, for each stored token at
    positions k.., the gap (nats) between the server's top choice and that stored token
    when the server is fed the prompt plus the stored tokens before it."""
    eps = clamp_eps(eps)
    for i, (s, l) in enumerate(zip(stored, live)):
        if s.key() == l.key():
            if abs(s.logprob - l.logprob) >= PREFIX_LOGPROB_TOL:
                return TieVerdict(False, f"token {i} {s.text!r} matches but its logprob moved "
                                         f"{s.logprob:.3f} -> {l.logprob:.3f}", i,
                                  detail=[f"stored top: {_top_text(s)}", f"live top:   {_top_text(l)}"])
            continue
        stored_other = _logprob_of(s, l.key())
        live_other = _logprob_of(l, s.key())
        stored_gap = None if stored_other is None else s.logprob - stored_other
        live_gap = None if live_other is None else l.logprob - live_other
        detail = [f"first divergence at token {i}: stored {s.text!r} ({s.logprob:.3f}) vs live "
                  f"{l.text!r} ({l.logprob:.3f})",
                  f"stored top: {_top_text(s)}", f"live top:   {_top_text(l)}",
                  f"gap in stored run: {'not in top list' if stored_gap is None else f'{stored_gap:.3f}'}; "
                  f"in live run: {'not in top list' if live_gap is None else f'{live_gap:.3f}'}; eps {eps:.3f}"]
        near_tie = (stored_gap is not None and live_gap is not None
                    and stored_gap <= eps and live_gap <= eps)
        if not near_tie:
            return TieVerdict(False, f"divergence at token {i} is not a near-tie in both runs", i,
                              stored_gap, live_gap, detail)
        if rescore is None or i + 1 >= len(stored):
            return TieVerdict(True, f"near-tie at token {i}; nothing after it to re-score", i,
                              stored_gap, live_gap, detail)
        gaps = rescore(i + 1)
        drift = [(i + 1 + k, g) for k, g in enumerate(gaps) if g > DRIFT]
        worst = max(gaps, default=0.0)
        detail.append(f"re-scored {len(gaps)} stored tokens after it: worst gap {worst:.3f} nats, "
                      f"{len(drift)} over {DRIFT}")
        if worst > RESCORE_FAIL:
            at = i + 1 + gaps.index(worst)
            return TieVerdict(False, f"stored token {at} is {worst:.3f} nats below the server's "
                                     f"top choice after the near-tie at {i}", i, stored_gap, live_gap,
                              detail, drift, worst)
        return TieVerdict(True, f"near-tie at token {i}; stored continuation still scores "
                                f"(worst gap {worst:.3f})", i, stored_gap, live_gap, detail, drift, worst)
    if len(stored) != len(live):
        n = min(len(stored), len(live))
        return TieVerdict(False, f"lengths differ ({len(stored)} stored, {len(live)} live) after "
                                 f"{n} equal tokens", n)
    return TieVerdict(True, f"all {len(stored)} tokens equal")
