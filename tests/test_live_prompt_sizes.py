"""Prompt sizing for the live layer: haystack lengths up to the server's limit and the
word budget per token target (with a stand-in tokenizer: whitespace words x 1.3)."""

import pytest

from kdgate.live_prompts import (OUTPUT_RESERVE, TokenBudget, churn_prompts, haystack_lengths,
                                 passkey_grid)


def fake_count(text: str) -> int:
    return int(len(text.split()) * 1.3)


@pytest.mark.parametrize("limit, expected", [
    (8192, [1024, 2048, 4096, 8192 - OUTPUT_RESERVE]),
    (131072, [1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072 - OUTPUT_RESERVE]),
    (1000, [1000 - OUTPUT_RESERVE]),
])
def test_lengths_double_up_to_the_limit(limit, expected):
    assert haystack_lengths(limit) == expected


def test_a_limit_without_room_is_refused():
    with pytest.raises(ValueError, match="context limit 300"):
        haystack_lengths(300)


def test_grid_has_three_depths_per_length_and_fits():
    budget = TokenBudget(fake_count, sample_words=300)
    grid = passkey_grid(budget, 8192)
    assert len(grid) == 4 * 3 and len({p.id for p in grid}) == 12
    for p in grid:
        tokens = int(p.id.split("-t")[1].split("-")[0])
        assert fake_count(p.text) <= tokens + 40, p.id   # the needle and question add a little
        assert p.expect and p.expect in p.text


def test_churn_lengths_span_short_to_the_limit():
    budget = TokenBudget(fake_count, sample_words=300)
    prompts = churn_prompts(200, budget, 8192, seed=3)
    sizes = sorted(fake_count(p.text) for p in prompts)
    assert sizes[0] < 100 and sizes[-1] > 4000 and sizes[-1] <= 8192 - OUTPUT_RESERVE
    assert churn_prompts(200, budget, 8192, seed=3) == prompts   # deterministic
