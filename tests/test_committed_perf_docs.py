"""The generated documents next to the committed full-matrix run stay equal to what their
commands print for it: regenerate them, never edit them, when `bench.json` or the command
changes (`kdtree-gate targets|limits docs/perf-h200-wgmma/bench.json`, under the header)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kdgate import perf_limits, perf_targets

RUN = Path(__file__).resolve().parent.parent / "docs/perf-h200-wgmma"


@pytest.mark.parametrize("document, describe", [("targets.md", perf_targets.describe),
                                                 ("limits.md", perf_limits.describe)])
def test_committed_document_matches_the_committed_full_run(document, describe):
    bench = json.loads((RUN / "bench.json").read_text())
    text = (RUN / document).read_text()
    assert describe(bench) in text
    assert bench["environment"]["kernel_build"] in text
