"""Tie calibration: noise over equal prefixes, split gaps, and the suggested ε."""

import pytest

from kdgate.live_client import Generation, TokenStep
from kdgate.tie_calibration import calibrate, pair_noise


def step(tid, lp, alts):
    top = tuple(sorted([(tid, str(tid), lp)] + [(a, str(a), alp) for a, alp in alts], key=lambda x: -x[2]))
    return TokenStep(tid, str(tid), lp, top)


def gen(*steps):
    return Generation(5, list(steps), "", "length")


def test_equal_runs_have_no_noise():
    a = [step(1, -0.1, [(2, -3.0)]), step(3, -0.2, [(4, -2.0)])]
    assert pair_noise(a, a) == (0.0, None)


def test_noise_and_split_gap():
    a = [step(1, -0.10, [(2, -3.0)]), step(3, -0.70, [(4, -0.75)])]
    b = [step(1, -0.14, [(2, -3.0)]), step(4, -0.69, [(3, -0.80)])]
    noise, split = pair_noise(a, b)
    assert noise == pytest.approx(0.04) and split == pytest.approx(0.11)


def test_a_split_to_an_unlisted_token_is_infinitely_wide():
    a = [step(1, -0.1, [(2, -3.0)])]
    b = [step(9, -0.1, [(2, -3.0)])]
    assert pair_noise(a, b)[1] == float("inf")


def test_suggestion_is_clamped_and_follows_the_widest_gap():
    quiet = calibrate([{"p": gen(step(1, -0.1, []))}, {"p": gen(step(1, -0.1001, []))}])
    assert quiet.suggested_eps == 0.05
    a = {"p": gen(step(1, -0.70, [(4, -0.75)]))}
    b = {"p": gen(step(4, -0.69, [(1, -0.84)]))}
    split = calibrate([a, b])
    assert split.widest_split == pytest.approx(0.15) and split.suggested_eps == pytest.approx(0.18)
    wild = calibrate([a, {"p": gen(step(9, -0.1, []))}])
    assert wild.suggested_eps == 0.25 and "suggested --tie-eps 0.250" in wild.summary()
