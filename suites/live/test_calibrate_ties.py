"""Live layer, on request (--calibrate-ties N): the noise of this server's greedy
generations over N reruns of the snapshot prompts (each rerun one burst, as the snapshot
test sends them), and a suggested --tie-eps.

Measured: the largest |Δ logprob| of the same token at the same position between runs
with equal prefixes, and the gaps (in both runs) at every first divergence between two
runs. Suggested ε = clamp(max(3 × largest logprob noise, 1.2 × largest split gap)) to
[0.05, 0.25]. Fails when this server's own reruns would fail the tie rule: noise of 0.5
nats or more before a split, or a split wider than 0.25 nats."""

import itertools

import pytest

from kdgate.live_burst import send_burst
from kdgate.tie_rule import EPS_MAX, PREFIX_LOGPROB_TOL, clamp_eps
from suites.live.test_snapshots import prompts

pytestmark = pytest.mark.live


def pair_noise(a, b) -> tuple[float, float | None]:
    """(largest |Δ logprob| over the equal prefix, the wider of the two gaps at the first
    divergence or None when the runs agree; inf when the other token is not in a top list)."""
    noise = 0.0
    for sa, sb in zip(a, b):
        if sa.key() != sb.key():
            def gap(run_step, other):
                alt = next((lp for tid, t, lp in run_step.top if (tid if tid is not None else t) == other.key()), None)
                return float("inf") if alt is None else run_step.logprob - alt
            return noise, max(gap(sa, sb), gap(sb, sa))
        noise = max(noise, abs(sa.logprob - sb.logprob))
    return noise, None


def test_calibrate_tie_eps(live_client, pytestconfig, gate_notes):
    reruns = pytestconfig.getoption("--calibrate-ties")
    if reruns < 2:
        pytest.skip("not run: calibration is asked for with --calibrate-ties N (N >= 2)")
    items = prompts()
    runs = [send_burst(live_client, items) for _ in range(reruns)]
    noise, splits = 0.0, []
    for p in items:
        for a, b in itertools.combinations(runs, 2):
            n, split = pair_noise(a[p.id].steps, b[p.id].steps)
            noise = max(noise, n)
            if split is not None:
                splits.append((p.id, split))
    widest = max((g for _, g in splits), default=0.0)
    suggested = clamp_eps(max(3 * noise, 1.2 * widest if widest != float("inf") else EPS_MAX))
    gate_notes.append(f"live tie calibration: {reruns} reruns x {len(items)} prompts "
                      f"({reruns * len(items)} requests): logprob noise before a split up to {noise:.4f} nats, "
                      f"{len(splits)} split(s) (widest gap {widest:.4f}); suggested --tie-eps {suggested:.3f}")
    print(f"suggested --tie-eps {suggested:.3f} (noise {noise:.4f}, widest split {widest:.4f})")
    assert noise < PREFIX_LOGPROB_TOL, f"logprobs move {noise:.3f} nats between reruns of the same prompt"
    assert widest <= EPS_MAX, (f"reruns split at gaps up to {widest:.3f} nats (over {EPS_MAX}): "
                               f"{[s for s in splits if s[1] > EPS_MAX][:5]}")
