"""Live layer: speculative acceptance. The snapshot prompts (canonical + fillers, all in
flight at once) are sent again; the pooled acceptance the server reports (SGLang: accept
length; llama-server: draft acceptance rate, see kdgate.spec_acceptance) must not drop
more than --accept-margin below the stored snapshot's. A wrong verify kernel rejects good
drafts before it changes any text."""

from pathlib import Path

import pytest

from kdgate.generation_snapshot import stored_file
from kdgate.live_burst import send_burst
from kdgate.live_prompts import snapshot_prompts as prompts
from kdgate.spec_acceptance import acceptance_problem, pooled_acceptance

pytestmark = pytest.mark.live


def stored_snapshot(identity: dict, snapshot_dir: str) -> dict:
    import json

    path = stored_file(Path(snapshot_dir), "test_snapshots", "test_generations_match_the_snapshot")
    if not path.is_file():
        pytest.skip(f"not run: no stored generation snapshot ({path}); record one with "
                    "--snapshot-update")
    stored = json.loads(path.read_text())
    if stored["identity"] != identity:
        pytest.fail(f"the stored snapshot is of {stored['identity']}, this server is {identity}; "
                    "record one for this server with --snapshot-update")
    return stored


def test_speculative_acceptance_holds(live_client, pytestconfig, gate_notes):
    margin = pytestconfig.getoption("--accept-margin")
    items = prompts()
    live_run = send_burst(live_client, items)
    live = pooled_acceptance(g.meta for g in live_run.values())
    stored = stored_snapshot(live_client.identity(), pytestconfig.getoption("--snapshot-dir"))
    before = pooled_acceptance(stored["generations"][p.id].get("meta", {})
                               for p in items if p.id in stored["generations"])
    if live is None and before is None:
        pytest.skip("not run: the server reports no speculative decoding (no draft statistics)")
    problem = acceptance_problem(before, live, margin)
    gate_notes.append(
        f"live speculative acceptance: {'—' if live is None else f'{live.measure} {live.value:.3f} over {live.requests} requests'}"
        f" vs snapshot {'—' if before is None else f'{before.value:.3f} over {before.requests}'}"
        f" (margin {margin:.0%}): {'FAIL: ' + problem if problem else 'holds'}")
    assert problem is None, problem
