"""Prompt material the project ships, generated deterministically (no downloads).

Three kinds of text, all written for this project: a station log (numbers, names,
dates), a technical narrative, and a code listing. ``document(kind, words, seed)``
yields about ``words`` words of one kind; the same arguments give the same text.
"""

from __future__ import annotations

import random

STATIONS = ["Alder Point", "Brackwater", "Cinder Ridge", "Dunmore Flats", "Eastwick Pier",
            "Fallow Gate", "Greystone", "Harrow Bay", "Ivel Crossing", "Juniper Hollow"]
SKY = ["clear", "overcast", "light rain", "fog over the water", "scattered cloud",
       "a cold north wind", "low mist", "sleet after noon"]
CHORES = ["checked the anemometer bearings", "replaced the barometer seal",
          "logged two supply crates", "cleared ice from the rain gauge",
          "re-taped the antenna lead", "calibrated the thermometer against the spare",
          "swept the landing", "recorded a passing freighter"]

NARRATIVE = [
    "The verifier reads every draft token in one pass, so the cost of a wrong guess is "
    "paid only once per step.",
    "When the cache fills, the scheduler retracts the newest request and returns its "
    "slots to the pool, which the next arrival will take in whatever order they come.",
    "A tree of guesses shares its prefix: each branch sees the committed context and its "
    "own ancestors, never its siblings.",
    "Operators prefer one command that says go or no-go, and a page that says why.",
    "Long prompts stress the attention kernel differently from short ones, because the "
    "softmax is dominated by a few keys far back in the context.",
    "The night shift keeps a paper log as well, in case the network goes down again.",
    "Each worker process writes its own line when the patch takes effect, so a missing "
    "line points at a missing worker.",
    "Rounding happens once at the end; everything before it is carried in wider formats.",
]

CODE = [
    "def merge_free(free, released):\n    pages = sorted(free + released)\n    return pages, []\n",
    "for step in range(steps):\n    batch = scheduler.next_batch()\n    if not batch:\n        break\n",
    "class Slot:\n    def __init__(self, index):\n        self.index = index\n        self.owner = None\n",
    "def runs(slots):\n    count = 1\n    for a, b in zip(slots, slots[1:]):\n        count += b != a + 1\n    return count\n",
    "if tokens_left < reserve:\n    victim = running.pop()\n    allocator.free(victim.slots)\n",
]


def _station_entry(rng: random.Random, day: int) -> str:
    name = rng.choice(STATIONS)
    return (f"Day {day}, {name}: {rng.choice(SKY)}, {rng.randint(-12, 24)} degrees, wind "
            f"{rng.randint(0, 60)} knots from {rng.randint(0, 359)}. The keeper "
            f"{rng.choice(CHORES)} and {rng.choice(CHORES)}. Pressure {rng.randint(960, 1040)} hPa.")


def document(kind: str, words: int, seed: int = 0) -> str:
    """About ``words`` words of ``kind`` ('log', 'narrative', 'code')."""
    rng = random.Random(f"{kind}:{seed}")
    parts, count, day = [], 0, 1
    while count < words:
        if kind == "log":
            part = _station_entry(rng, day)
            day += 1
        elif kind == "narrative":
            part = rng.choice(NARRATIVE)
        elif kind == "code":
            part = rng.choice(CODE)
        else:
            raise ValueError(f"kind must be 'log', 'narrative' or 'code', got {kind!r}")
        parts.append(part)
        count += len(part.split())
    return ("\n" if kind == "code" else " ").join(parts)


def chat_prompt(body: str, question: str) -> str:
    """The model's chat format around a document and a question."""
    return (f"<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
            f"Hugging Face<|im_end|>\n<|im_start|>user\n{body}\n\n{question}<|im_end|>\n"
            f"<|im_start|>assistant\n")
