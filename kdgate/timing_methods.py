"""The timing methods a benchmark or A/B result names in its ``timing`` field.

The first two replay one call from a CUDA graph after a 512 MiB read flush
(kdgate.gpu_timing); they differ in what runs between that flush and the timed replay:

* ``flushed``: nothing, so the call's instructions come from DRAM along with its data;
* ``code-warm``: one untimed call of the same code on other inputs of the case's shape, so
  the call's instructions and workspace are in L2 and its own inputs are not (inputs
  rotated: a serving loop whose layers run the same kernels, each on its own data).

The third replays many calls at once and never flushes:

* ``rotated``: calls of the case's shape, each on its own input set (enough sets that they
  hold several times the L2, so no call finds its inputs there), back to back in one CUDA
  graph; a call's time is the replay's ÷ its calls. A serving loop's view: each launch
  overlaps the previous call's end, as the layers of a model's graph do.

A result without the field was flushed (every result before the field existed).
"""

from __future__ import annotations

TIMINGS = {
    "flushed": "after the read flush",
    "code-warm": "after the read flush and one call of the same code on other inputs of the case's shape",
    "rotated": "back to back with calls of the case's shape on other inputs, in one CUDA graph with no flush",
}
DEFAULT_TIMING = "flushed"


def check_timing(timing: str) -> str:
    """``timing`` itself when it names a method; ValueError naming the field otherwise."""
    if timing not in TIMINGS:
        raise ValueError(f"timing must be one of {sorted(TIMINGS)}, got {timing!r}")
    return timing


def result_timing(result: dict) -> str:
    """The method a saved result was timed with (``flushed`` when it names none)."""
    return check_timing(result.get("timing", DEFAULT_TIMING))


def timing_words(timing: str) -> str:
    """What preceded each timed replay under ``timing``."""
    return TIMINGS[check_timing(timing)]
