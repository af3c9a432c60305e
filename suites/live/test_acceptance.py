"""Live layer: speculative acceptance. The snapshot prompts (canonical + fillers, all in
flight at once) are sent again; the pooled acceptance the server reports (SGLang: accept
length; llama-server: draft acceptance rate, see kdgate.spec_acceptance) must not drop
more than --accept-margin below the stored snapshot's. A wrong verify kernel rejects good
drafts before it changes any text. Every generation of the run is also compared with the
stored snapshot by the tie rule (a request of the batch the kernel corrupts fails here)."""

from pathlib import Path

import pytest

from kdgate.generation_snapshot import judge_generations, steps_of, stored_file
from kdgate.live_burst import send_burst
from kdgate.live_prompts import snapshot_prompts as prompts
from kdgate.spec_acceptance import acceptance_problem, pooled_acceptance

pytestmark = pytest.mark.live


def stored_snapshot(identity: dict, snapshot_dir: str, updating: bool) -> dict:
    import json

    path = stored_file(Path(snapshot_dir), "test_snapshots", "test_generations_match_the_snapshot")
    if not path.is_file():
        pytest.skip(f"not run: no stored generation snapshot ({path}); record one with "
                    "--snapshot-update")
    stored = json.loads(path.read_text())
    if stored["identity"] != identity:
        if updating:
            pytest.skip("not run: this run records the first snapshot of this server "
                        "(--snapshot-update); acceptance is judged against it from the next run")
        pytest.fail(f"the stored snapshot is of {stored['identity']}, this server is {identity}; "
                    "record one for this server with --snapshot-update")
    return stored


def test_speculative_acceptance_holds(live_client, pytestconfig, tie_eps, gate_notes, gate_data):
    margin = pytestconfig.getoption("--accept-margin")
    items = prompts()
    live_run = send_burst(live_client, items)
    live = pooled_acceptance(g.meta for g in live_run.values())
    stored = stored_snapshot(live_client.identity(), pytestconfig.getoption("--snapshot-dir"),
                             bool(pytestconfig.getoption("--snapshot-update")))
    reference = {pid: steps_of(entry) for pid, entry in stored["generations"].items()}
    changed = judge_generations(live_client, items, reference, live_run, tie_eps, "acceptance", gate_data)
    assert not changed, ("the acceptance run's generations differ from the stored snapshot:\n"
                         + "\n".join(changed))
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
