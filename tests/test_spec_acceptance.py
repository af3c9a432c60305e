"""The speculative-acceptance check: pooling per server kind, and the margin rule."""

import pytest

from kdgate.spec_acceptance import Acceptance, acceptance_problem, pooled_acceptance


def test_sglang_accept_length_is_weighted_by_verify_steps():
    a = pooled_acceptance([{"spec_accept_length": 3.0, "spec_verify_ct": 10},
                           {"spec_accept_length": 1.0, "spec_verify_ct": 30}, {}])
    assert a == Acceptance(1.5, "accept length", 2)


def test_llama_server_drafts_are_pooled():
    a = pooled_acceptance([{"draft_n": 10, "draft_n_accepted": 9}, {"draft_n": 30, "draft_n_accepted": 3},
                           {"draft_n": 0}])
    assert a == Acceptance(12 / 40, "draft acceptance rate", 2)


def test_no_speculation_reported_is_none():
    assert pooled_acceptance([{}, {"cached_tokens": 3}]) is None


@pytest.mark.parametrize("live, fails", [(0.95, False), (0.90, False), (0.89, True), (None, True)])
def test_a_drop_beyond_the_margin_fails(live, fails):
    stored = Acceptance(1.0, "accept length", 6)
    live_a = None if live is None else Acceptance(live, "accept length", 6)
    problem = acceptance_problem(stored, live_a, 0.10)
    assert (problem is not None) == fails
    if fails:
        assert "snapshot" in problem


def test_a_snapshot_without_speculation_has_nothing_to_hold():
    assert acceptance_problem(None, Acceptance(0.5, "draft acceptance rate", 3), 0.1) is None


def test_different_measures_are_not_compared():
    problem = acceptance_problem(Acceptance(3.0, "accept length", 2),
                                 Acceptance(0.9, "draft acceptance rate", 2), 0.1)
    assert "accept length" in problem and "draft acceptance rate" in problem
