"""Live layer, first check: the server's greedy generations with logprobs are repeatable
under the tie-aware rule (a server that is not cannot be snapshot-tested)."""

import pytest

from kdgate.tie_rule import compare_generations

pytestmark = pytest.mark.live

PROMPT = "The capital of France is"


def test_greedy_generation_is_repeatable(live_client):
    first = live_client.complete(PROMPT, max_tokens=24)
    second = live_client.complete(PROMPT, max_tokens=24)
    assert len(first.steps) == 24 and all(len(s.top) >= 1 for s in first.steps)
    not_top = [s for s in first.steps if s.logprob < s.top[0][2] - 1e-6]
    assert not not_top, f"temperature 0 did not take the top token at {len(not_top)} step(s): {not_top[:2]}"
    verdict = compare_generations(first.steps, second.steps)
    assert verdict.passed, verdict.report()
