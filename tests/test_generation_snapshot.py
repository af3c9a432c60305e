"""The snapshot extension's own rules, on constructed payloads (the live layer runs it
against a real server)."""

import json

from kdgate.generation_snapshot import GenerationSnapshotExtension, payload
from kdgate.live_client import Generation, TokenStep

IDENTITY = {"server": "openai-compatible", "model": "SmolLM2-135M-Instruct.Q4_1.gguf", "tp_size": 1}


def gen(*tokens):
    steps = [TokenStep(None, text, lp, tuple((None, t, l) for t, l in top)) for text, lp, top in tokens]
    return Generation(3, steps, "".join(t for t, _, _ in tokens), "length")


STORED = payload(IDENTITY, {"p": gen((" a", -0.1, [(" a", -0.1), (" b", -3.0)]),
                                    (" c", -0.5, [(" c", -0.5), (" d", -0.55)]))})


def test_same_generations_match_and_identity_is_pinned():
    ext = GenerationSnapshotExtension()
    assert ext.judge(STORED, STORED) == []
    other = {**STORED, "identity": {**IDENTITY, "model": "other.gguf"}}
    problems = ext.judge(other, STORED)
    assert len(problems) == 1 and "not compared" in problems[0] and "other.gguf" in problems[0]


def test_divergence_that_is_not_a_tie_is_reported_readably():
    ext = GenerationSnapshotExtension()
    live = payload(IDENTITY, {"p": gen((" b", -0.2, [(" b", -0.2), (" a", -2.0)]),
                                      (" c", -0.5, [(" c", -0.5)]))})
    problems = ext.judge(live, STORED)
    assert problems and "first divergence at token 0" in problems[0] and "stored top" in problems[0]
    assert not ext.matches(serialized_data=json.dumps(live), snapshot_data=json.dumps(STORED))
    assert "first divergence" in "\n".join(ext.diff_lines(json.dumps(live), json.dumps(STORED)))


def test_missing_prompt_is_a_problem():
    live = payload(IDENTITY, {})
    assert GenerationSnapshotExtension().judge(live, STORED) == ["p: missing from this run"]


def test_stored_snapshots_are_never_deleted(tmp_path):
    stored = tmp_path / "snap.json"
    stored.write_text("{}")
    GenerationSnapshotExtension().delete_snapshots(snapshot_location=str(stored), snapshot_names={"x"})
    assert stored.is_file()
