"""The tie-aware comparison on constructed generations."""

import pytest

from kdgate.live_client import TokenStep
from kdgate.tie_rule import clamp_eps, compare_generations


def step(tid, lp, *alts):
    """A token with its top list (itself first, then (id, logprob) alternatives)."""
    top = tuple(sorted([(tid, f"t{tid}", lp)] + [(a, f"t{a}", alp) for a, alp in alts], key=lambda x: -x[2]))
    return TokenStep(tid, f"t{tid}", lp, top)


STORED = [step(1, -0.1, (2, -3.0)), step(5, -0.70, (6, -0.75)), step(7, -0.2, (8, -2.0)), step(9, -0.3)]


def test_identical_generations_pass():
    assert compare_generations(STORED, list(STORED)).passed


def test_logprob_drift_before_divergence_fails():
    live = [step(1, -0.7, (2, -3.0))] + STORED[1:]
    verdict = compare_generations(STORED, live)
    assert not verdict.passed and "logprob moved" in verdict.reason


def test_near_tie_split_passes_when_the_stored_continuation_still_scores():
    live = [STORED[0], step(6, -0.72, (5, -0.74)), step(3, -0.1), step(4, -0.1)]
    verdict = compare_generations(STORED, live, rescore=lambda k: [0.1, 0.3])
    assert verdict.passed and verdict.first_divergence == 1
    assert verdict.drift == [(3, 0.3)]
    assert "first divergence at token 1" in verdict.report()


def test_rescored_continuation_far_below_top_fails():
    live = [STORED[0], step(6, -0.72, (5, -0.74)), step(3, -0.1), step(4, -0.1)]
    verdict = compare_generations(STORED, live, rescore=lambda k: [0.1, 1.5])
    assert not verdict.passed and "1.500 nats below" in verdict.reason
    assert verdict.rescored_worst == 1.5


@pytest.mark.parametrize("live_step, why", [
    (step(6, -0.2, (5, -0.9)), "gap 0.7 in the live run"),
    (step(6, -0.2, (11, -3.0)), "the stored token is not in the live top list"),
])
def test_divergence_that_is_not_a_near_tie_fails(live_step, why):
    live = [STORED[0], live_step] + STORED[2:]
    verdict = compare_generations(STORED, live)
    assert not verdict.passed and "not a near-tie" in verdict.reason, why
    assert "stored top:" in verdict.report() and "live top:" in verdict.report()


def test_eps_is_clamped_and_decides_ties():
    assert clamp_eps(0.0) == 0.05 and clamp_eps(1.0) == 0.25 and clamp_eps(0.1) == 0.1
    live = [STORED[0], step(6, -0.62, (5, -0.70))] + STORED[2:]
    assert compare_generations(STORED, live, eps=0.10).passed
    assert not compare_generations(STORED, live, eps=0.05).passed


def test_shorter_live_generation_fails():
    verdict = compare_generations(STORED, STORED[:2])
    assert not verdict.passed and "lengths differ" in verdict.reason
