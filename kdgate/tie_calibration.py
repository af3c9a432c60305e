"""Calibrating the tie rule's ε on a server: how far its greedy logprobs move between
runs of the same prompts, alone and inside bursts of other requests (batch composition
is the noise source that the snapshot and concurrency tests meet).

Suggested ε = clamp(max(3 × largest logprob noise over equal prefixes,
1.2 × widest gap at a first divergence)) to the rule's [0.05, 0.25]."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Sequence

from kdgate.live_client import TokenStep
from kdgate.tie_rule import EPS_MAX, clamp_eps


def pair_noise(a: Sequence[TokenStep], b: Sequence[TokenStep]) -> tuple[float, float | None]:
    """(largest |Δ logprob| of the chosen token over the equal prefix, the wider of the
    two runs' gaps at the first divergence — None when the runs agree, inf when one run
    does not list the other's token)."""
    noise = 0.0
    for sa, sb in zip(a, b):
        if sa.key() != sb.key():
            def gap(step, other):
                alt = next((lp for tid, t, lp in step.top if (tid if tid is not None else t) == other.key()), None)
                return float("inf") if alt is None else step.logprob - alt
            return noise, max(gap(sa, sb), gap(sb, sa))
        noise = max(noise, abs(sa.logprob - sb.logprob))
    return noise, None


@dataclass
class Calibration:
    runs: int
    prompts: int
    noise: float = 0.0
    splits: list[tuple[str, float]] = field(default_factory=list)

    @property
    def widest_split(self) -> float:
        return max((g for _, g in self.splits), default=0.0)

    @property
    def suggested_eps(self) -> float:
        widest = self.widest_split
        return clamp_eps(max(3 * self.noise, 1.2 * widest if widest != float("inf") else EPS_MAX))

    def summary(self) -> str:
        return (f"{self.runs} runs x {self.prompts} prompts: logprob noise before a split up to "
                f"{self.noise:.4f} nats, {len(self.splits)} split(s) (widest gap {self.widest_split:.4f}); "
                f"suggested --tie-eps {self.suggested_eps:.3f}")


def calibrate(runs: list[dict]) -> Calibration:
    """``runs``: one dict per run, prompt id -> Generation (same ids in every run)."""
    ids = sorted(runs[0])
    out = Calibration(len(runs), len(ids))
    for pid in ids:
        for a, b in itertools.combinations(runs, 2):
            noise, split = pair_noise(a[pid].steps, b[pid].steps)
            out.noise = max(out.noise, noise)
            if split is not None:
                out.splits.append((pid, split))
    return out
