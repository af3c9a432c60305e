"""Prompts the live layer sends, generated deterministically from the project's own text
(kdgate.prompts): canonical prompts that snapshots and re-checks compare, passkey
haystacks, multi-document fact look-ups and code, and mixed-length fillers for bursts.
Lengths are in words here; token counts come from the server (usage.prompt_tokens).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from kdgate.prompts import document


@dataclass(frozen=True)
class LivePrompt:
    id: str
    text: str
    max_tokens: int
    expect: str | None = None     # a string the answer must contain (task check), if any


def passkey(words: int, depth: float, seed: int = 0) -> LivePrompt:
    """A log-text haystack of about ``words`` words with a 5-digit pass key at ``depth``."""
    key = random.Random(f"passkey:{words}:{depth}:{seed}").randint(10000, 99999)
    filler = document("log", words, seed=seed + 11).split(". ")
    at = int(len(filler) * depth)
    needle = f"The pass key is {key}. Remember it. {key} is the pass key"
    text = ". ".join(filler[:at] + [needle] + filler[at:])
    return LivePrompt(f"passkey-w{words}-d{int(depth * 100)}", text +
                      ".\n\nWhat is the pass key? The pass key is", 8, str(key))


def fact_lookup(documents: int, words_each: int, seed: int = 0) -> LivePrompt:
    """Several station logs; the question asks for one station's reading on one day."""
    rng = random.Random(f"facts:{seed}")
    docs = [f"Document {i + 1}.\n" + document("log", words_each, seed=seed * 100 + i) for i in range(documents)]
    pick = rng.randrange(documents)
    day_line = docs[pick].split(". ")[0]
    return LivePrompt(f"facts-{documents}x{words_each}", "\n\n".join(docs) +
                      f"\n\nIn document {pick + 1}, the first entry reads: {day_line.split(':')[0]}. "
                      f"What was the weather that day? Answer:", 16)


def code(words: int, seed: int = 0) -> LivePrompt:
    return LivePrompt(f"code-w{words}", document("code", words, seed) + "\n# The function above", 16)


def canonical() -> list[LivePrompt]:
    """The prompts every pass compares (short enough for the embedded CPU server)."""
    return [
        LivePrompt("capital", "The capital of France is", 16, "Paris"),
        passkey(300, 0.5), passkey(300, 0.9),
        fact_lookup(3, 80), code(120),
        LivePrompt("narrative", document("narrative", 150, 3) + "\n\nIn short,", 16),
    ]


def snapshot_prompts() -> list[LivePrompt]:
    """What the snapshot and acceptance tests send at once: the canonical prompts and 10
    mixed-length fillers (16 requests)."""
    return canonical() + burst_fillers(10, seed=2, words=(20, 250))


def burst_fillers(count: int, seed: int = 0, words: tuple[int, int] = (20, 400)) -> list[LivePrompt]:
    """``count`` prompts of mixed lengths for bursts and churn."""
    rng = random.Random(f"burst:{seed}")
    kinds = ("log", "narrative", "code")
    return [LivePrompt(f"filler-{i}", document(rng.choice(kinds), rng.randint(*words), seed=seed * 1000 + i),
                       rng.randint(4, 16)) for i in range(count)]


OUTPUT_RESERVE = 64   # tokens kept free in a request for the question and the answer


class TokenBudget:
    """Sizes prompts in the server's tokens: ``tokens_per_word`` is measured once with the
    server's tokenizer on a sample of each kind of text the prompts are made of."""

    def __init__(self, count_tokens, sample_words: int = 1500):
        self.ratio = {}
        for kind in ("log", "narrative", "code"):
            sample = document(kind, sample_words, seed=97)
            self.ratio[kind] = count_tokens(sample) / len(sample.split())

    def words_for(self, tokens: int, kind: str = "log") -> int:
        """Words of ``kind`` that stay below ``tokens`` (3 % margin for tokenizer variance)."""
        return max(10, int(tokens * 0.97 / self.ratio[kind]))


def haystack_lengths(limit: int, start: int = 1024) -> list[int]:
    """Prompt lengths in tokens from ``start`` doubling up to the server's limit, always
    ending with the longest one the limit allows."""
    top = limit - OUTPUT_RESERVE
    if top < 256:
        raise ValueError(f"the server's context limit {limit} leaves no room for a haystack")
    lengths, n = [], min(start, top)
    while n < top:
        lengths.append(n)
        n *= 2
    return lengths + [top]


def passkey_grid(budget: TokenBudget, limit: int, depths=(0.1, 0.5, 0.9)) -> list[LivePrompt]:
    """A pass key at each depth of haystacks of each length (ids name tokens and depth)."""
    grid = []
    for tokens in haystack_lengths(limit):
        for depth in depths:
            p = passkey(budget.words_for(tokens), depth)
            grid.append(LivePrompt(f"passkey-t{tokens}-d{int(depth * 100)}", p.text, p.max_tokens, p.expect))
    return grid


def churn_prompts(count: int, budget: TokenBudget, limit: int, seed: int = 0,
                  min_tokens: int = 32) -> list[LivePrompt]:
    """``count`` distinct prompts with lengths log-uniform between ``min_tokens`` and the
    limit (most short, some near it), of all three kinds, each from its own text (no
    shared prefixes, so a prefix cache cannot spare the server's KV allocator)."""
    rng = random.Random(f"churn:{seed}")
    top = limit - OUTPUT_RESERVE
    out = []
    for i in range(count):
        tokens = int(math.exp(rng.uniform(math.log(min_tokens), math.log(top))))
        kind = rng.choice(("log", "narrative", "code"))
        out.append(LivePrompt(f"churn-{i}-t{tokens}", document(kind, budget.words_for(tokens, kind),
                                                               seed=seed * 100000 + i), rng.randint(1, 16)))
    return out
