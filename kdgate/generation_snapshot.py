"""Stored generations (syrupy snapshots under ``snapshots/``) compared by the tie rule.

A snapshot holds the server identity and, per prompt, every generated token with its
logprob and top alternatives. The syrupy extension:

* refuses to compare against a snapshot of another server identity (model, tp_size,
  backend, speculative settings) and says so;
* compares token streams by the tie-aware rule (prefix equal, first difference a near-tie
  in both runs); the re-scoring of the stored continuation after a split needs the
  server, so the test does it (:func:`rescore_stored`) and asserts it separately;
* reads a snapshot from ``--snapshot-dir`` (default ``./snapshots``), or, where that folder
  has none for the test, from the reference snapshots shipped with kdtree-gate (the
  embedded server's); writes only under ``--snapshot-update``, only into ``--snapshot-dir``,
  and never deletes a stored snapshot (a test that errored during an update leaves its
  snapshot as it was; remove stale files by hand);
* on failure prints the first-divergence reports instead of a JSON diff.
"""

from __future__ import annotations

import json
from pathlib import Path

from syrupy.extensions.json import JSONSnapshotExtension

from kdgate.live_client import Generation, TokenStep
from kdgate.shipped import data_dir
from kdgate.tie_rule import EPS_DEFAULT, compare_generations

# the reference snapshots shipped with the gate (the embedded server's)
REFERENCE_DIR = data_dir("snapshots")


def payload(identity: dict, generations: dict[str, Generation]) -> dict:
    """The stored form: identity, and per prompt the text, every step (id, text, logprob,
    top list) and the server's speculative statistics when it reports them."""
    def entry(g: Generation) -> dict:
        out = {"text": g.text, "steps": [[s.id, s.text, s.logprob, [list(t) for t in s.top]] for s in g.steps]}
        if g.meta:
            out["meta"] = dict(sorted(g.meta.items()))
        return out

    return {"identity": identity, "generations": {pid: entry(g) for pid, g in sorted(generations.items())}}


def steps_of(entry: dict) -> list[TokenStep]:
    return [TokenStep(tid, text, float(lp), tuple((a, b, float(c)) for a, b, c in top))
            for tid, text, lp, top in entry["steps"]]


class GenerationSnapshotExtension(JSONSnapshotExtension):
    eps = EPS_DEFAULT
    snapshot_dir = Path("snapshots")   # --snapshot-dir (set by the live layer's fixture)
    updating = False                   # --snapshot-update
    _last_reports: list[str] = []

    @classmethod
    def dirname(cls, *, test_location) -> str:
        return str(Path(cls.snapshot_dir).resolve() / Path(test_location.filepath).stem)

    @classmethod
    def get_location(cls, *, test_location, index) -> str:
        """The snapshot in --snapshot-dir; where it has none (and nothing is being written), the
        shipped reference snapshot of the same test, if there is one."""
        mine = Path(super().get_location(test_location=test_location, index=index))
        if cls.updating or mine.is_file():
            return str(mine)
        reference = REFERENCE_DIR / mine.parent.name / mine.name
        return str(reference if reference.is_file() else mine)

    def serialize(self, data, **kwargs) -> str:
        return json.dumps(data, indent=1, sort_keys=True) + "\n"

    def delete_snapshots(self, *args, **kwargs) -> None:
        """Never delete: a stored snapshot is replaced only by a new one."""
        return None

    def judge(self, live: dict, stored: dict) -> list[str]:
        """Problems of ``live`` against ``stored`` (empty: they agree)."""
        if live["identity"] != stored["identity"]:
            return [f"snapshot recorded against {stored['identity']}, this server is "
                    f"{live['identity']}: not compared (record one for this server with "
                    f"--snapshot-update)"]
        problems = []
        for pid, entry in stored["generations"].items():
            if pid not in live["generations"]:
                problems.append(f"{pid}: missing from this run")
                continue
            verdict = compare_generations(steps_of(entry), steps_of(live["generations"][pid]), self.eps)
            if not verdict.passed:
                problems.append(f"{pid}: {verdict.report()}")
        return problems

    def matches(self, *, serialized_data, snapshot_data) -> bool:
        problems = self.judge(json.loads(serialized_data), json.loads(snapshot_data))
        type(self)._last_reports = problems
        return not problems

    def diff_lines(self, serialized_data, snapshot_data):
        yield from (type(self)._last_reports or ["(the tie rule found no problem)"])


def stored_file(snapshot_dir: Path, module: str, test: str) -> Path:
    """The stored snapshot file of ``test`` (a function name) of test module ``module``: the one
    in ``snapshot_dir``, else the shipped reference one (the path in ``snapshot_dir`` when
    neither exists)."""
    mine = Path(snapshot_dir).resolve() / module / f"{test}.json"
    reference = REFERENCE_DIR / module / f"{test}.json"
    return reference if not mine.is_file() and reference.is_file() else mine


def read_stored(snapshot) -> dict | None:
    """The stored snapshot of this assertion (None if there is none yet)."""
    location = Path(snapshot.extension.get_location(test_location=snapshot.test_location,
                                                    index=snapshot.index))
    return json.loads(location.read_text()) if location.is_file() else None


def rescore_stored(client, prompt_text: str, stored_steps: list[TokenStep], start: int) -> list[float]:
    """Gaps (nats) between the server's top choice and each stored token from ``start``,
    the server being fed the prompt plus the stored tokens before it."""
    gaps, text = [], prompt_text + "".join(s.text for s in stored_steps[:start])
    for step in stored_steps[start:]:
        nxt = client.complete(text, 1).steps[0]
        mine = next((lp for tid, t, lp in nxt.top if (tid if tid is not None else t) == step.key()), None)
        gaps.append(float("inf") if mine is None else nxt.top[0][2] - mine)
        text += step.text
    return gaps


def judge_generations(client, prompts, reference: dict[str, list[TokenStep]],
                      live: dict[str, Generation], eps: float, test: str, gate_data: list) -> list[str]:
    """Each prompt's ``live`` generation against its ``reference`` steps by the tie rule
    (re-scoring the reference on ``client`` after a near-tie split); appends one figure per
    prompt to ``gate_data``. Returns the problems, one per failing prompt; a prompt missing
    from ``reference`` or ``live`` is a problem too (nothing goes unchecked silently)."""
    problems = []
    for p in prompts:
        if p.id not in reference or p.id not in live:
            problems.append(f"{p.id}: no {'reference' if p.id not in reference else 'live'} generation to compare")
            continue
        ref = reference[p.id]
        verdict = compare_generations(ref, live[p.id].steps, eps,
                                      rescore=lambda k, p=p, ref=ref: rescore_stored(client, p.text, ref, k))
        gate_data.append(verdict.figures(test, p.id, len(ref)))
        if not verdict.passed:
            problems.append(f"{p.id}: {verdict.report()}")
    return problems
