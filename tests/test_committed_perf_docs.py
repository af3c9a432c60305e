"""The generated documents next to each committed full-matrix run (the H200's and the H100's)
stay equal to what their commands print for it: regenerate them, never edit them, when
`bench.json` or the command changes (`kdtree-gate targets|limits docs/<run>/bench.json`, under
the header)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kdgate import perf_limits, perf_targets

DOCS = Path(__file__).resolve().parent.parent / "docs"


@pytest.mark.parametrize("run", ["perf-h200-wgmma", "perf-h100-wgmma"])
@pytest.mark.parametrize("document, describe", [("targets.md", perf_targets.describe),
                                                 ("limits.md", perf_limits.describe)])
def test_committed_document_matches_the_committed_full_run(run, document, describe):
    bench = json.loads((DOCS / run / "bench.json").read_text())
    text = (DOCS / run / document).read_text()
    assert describe(bench) in text
    assert bench["environment"]["kernel_build"] in text
    assert f"docs/{run}/bench.json" in text
