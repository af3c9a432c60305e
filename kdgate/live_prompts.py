"""Prompts the live layer sends, generated deterministically from the project's own text
(kdgate.prompts): canonical prompts that snapshots and re-checks compare, passkey
haystacks, multi-document fact look-ups and code, and mixed-length fillers for bursts.
Lengths are in words here; token counts come from the server (usage.prompt_tokens).
"""

from __future__ import annotations

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


def burst_fillers(count: int, seed: int = 0, words: tuple[int, int] = (20, 400)) -> list[LivePrompt]:
    """``count`` prompts of mixed lengths for bursts and churn."""
    rng = random.Random(f"burst:{seed}")
    kinds = ("log", "narrative", "code")
    return [LivePrompt(f"filler-{i}", document(rng.choice(kinds), rng.randint(*words), seed=seed * 1000 + i),
                       rng.randint(4, 16)) for i in range(count)]
