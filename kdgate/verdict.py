"""The gate's verdict over one or several runs, by profile.

Profiles:

* ``cutover`` (the default with ``--endpoint``): says whether the deployment may be cut over.
  **GO** (exit 0): every piece of cutover evidence (:data:`CUTOVER_EVIDENCE`) was supplied by
  a layer that ran and passed. **NO-GO** (exit 1): a layer that ran failed, or a layer named
  in ``--require`` did not pass. **INCOMPLETE** (exit 3): nothing failed, but evidence is
  missing; each missing piece comes with the command line that would supply it.
* ``selfcheck`` (the default without ``--endpoint``): checks that the gate works on this host
  (embedded server, the gate's own spawned workers and controls). **SELF-CHECK PASS**
  (exit 0) or **SELF-CHECK FAIL** (exit 1); never a cutover verdict. It names what a
  cutover run would still need.

Tests are told apart by what they judge (``judges`` in each test record, written by the
pytest plugin): ``deployment`` (the kernel under test, the patch, the server behind
``--endpoint`` and its records) or ``gate`` (the gate's own machinery: negative controls,
perturbed servers, spawned coverage workers, the embedded server). Only ``deployment``
tests count as cutover evidence.
"""

from __future__ import annotations

from dataclasses import dataclass

EXIT_GO, EXIT_NO_GO, EXIT_USAGE, EXIT_INCOMPLETE = 0, 1, 2, 3
PROFILES = ("cutover", "selfcheck")
SELF_CHECK_PASS, SELF_CHECK_FAIL = "SELF-CHECK PASS", "SELF-CHECK FAIL"
EXIT_CODES = {"GO": EXIT_GO, "NO-GO": EXIT_NO_GO, "INCOMPLETE": EXIT_INCOMPLETE,
              SELF_CHECK_PASS: EXIT_GO, SELF_CHECK_FAIL: EXIT_NO_GO}


@dataclass(frozen=True)
class Requirement:
    """One piece of cutover evidence: a layer whose deployment tests ran and passed."""
    name: str
    layer: str
    what: str                     # what must have run, in the report's words
    command: str                  # a command line that supplies it
    test: str | None = None       # this test function must be among them
    needs_endpoint: bool = False  # only a run against --endpoint supplies it
    every_fixture: bool = False   # no fixture parity test may have been skipped


CUTOVER_EVIDENCE = (
    Requirement("kernel", "kernel",
                "kernel parity on a CUDA GPU over the shipped fixtures and every --fixtures-dir",
                "on a GPU host: kdtree-gate nightly --profile cutover --layers kernel,graph "
                "[--fixtures-dir DIR] --report-dir gpu-run", every_fixture=True),
    Requirement("graph", "graph", "CUDA-graph capture and replay on a CUDA GPU",
                "on a GPU host: kdtree-gate nightly --profile cutover --layers kernel,graph --report-dir gpu-run"),
    Requirement("live", "live", "the live layer against the deployment (--endpoint, never the embedded server)",
                "kdtree-gate nightly --endpoint URL --layers live,coverage --report-dir live-run",
                needs_endpoint=True),
    Requirement("deployment coverage", "coverage",
                "every TP rank's coverage records from the deployment itself (--server-log, "
                "--journal-unit or --status-dir) for --tp-size ranks",
                "kdtree-gate nightly --endpoint URL --tp-size N --journal-unit UNIT --layers live,coverage "
                "--report-dir live-run", test="test_deployment_coverage"),
)
COMBINE_HINT = "then: kdtree-gate verdict gpu-run live-run"


def _tests(layer: dict, judges: str) -> list[dict]:
    return [t for t in layer.get("tests", []) if t.get("judges") == judges]


def judged_counts(layer: dict) -> dict[str, dict[str, int]]:
    """{"deployment": {passed, failed, skipped}, "gate": {...}} of one layer's test records."""
    out = {}
    for judges in ("deployment", "gate"):
        tests = _tests(layer, judges)
        out[judges] = {k: sum(1 for t in tests if t["outcome"] == k) for k in ("passed", "failed", "skipped")}
    return out


def _function(test_id: str) -> str:
    return test_id.split("::")[-1].split("[")[0]


def supplies(requirement: Requirement, run: dict, layer: dict) -> tuple[bool, str]:
    """Whether ``layer`` of ``run`` supplies ``requirement``; and why not, when it does not."""
    if layer["name"] != requirement.layer:
        return False, "another layer"
    if layer["status"] != "passed":
        first = f": {layer['reasons'][0]}" if layer.get("reasons") else ""
        return False, f"the {layer['name']} layer {layer['status']}{first}"
    if requirement.needs_endpoint and not run.get("options", {}).get("endpoint"):
        return False, "ran against the embedded server, not the deployment"
    evidence = _tests(layer, "deployment")
    passed = [t for t in evidence if t["outcome"] == "passed"]
    if requirement.test:
        passed = [t for t in passed if _function(t["test"]) == requirement.test]
    if not passed:
        skipped = [t for t in evidence if t["outcome"] == "skipped"
                   and (not requirement.test or _function(t["test"]) == requirement.test)]
        why = skipped[0].get("message") if skipped else None
        return False, why or "no test that judges the deployment passed there"
    if requirement.every_fixture:
        skipped = [t for t in evidence if t["outcome"] == "skipped" and _function(t["test"]) == "test_fixture_parity"]
        if skipped:
            return False, f"{len(skipped)} fixture parity test(s) skipped, e.g. {skipped[0]['test']}"
    return True, ""


def _where(run: dict) -> str:
    return run.get("source") or run.get("environment", {}).get("host", "this run")


def evaluate(runs: list[dict], profile: str, required: list[str] | None = None) -> dict:
    """The verdict over ``runs`` (nightly summaries: ``layers`` with test records, ``options``,
    ``environment``): {verdict, exit_code, reasons, evidence, missing}."""
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {PROFILES}, got {profile!r}")
    required = list(required or [])
    layers = [(run, layer) for run in runs for layer in run.get("layers", [])]
    reasons = [f"{layer['name']} ({_where(run)}): failed" + (f" - {layer['reasons'][0]}" if layer.get("reasons") else "")
               for run, layer in layers if layer["status"] == "failed"]
    for name in required:
        ran = [layer for _, layer in layers if layer["name"] == name]
        if not any(layer["status"] == "passed" for layer in ran):
            reasons.append(f"{name}: required but {ran[0]['status'] if ran else 'not run'}")
    evidence, missing = [], []
    for req in CUTOVER_EVIDENCE:
        found, why_not = None, []
        for run, layer in layers:
            ok, why = supplies(req, run, layer)
            if ok:
                found = run
                break
            if layer["name"] == req.layer:
                why_not.append(f"{_where(run)}: {why}")
        row = {"requirement": req.name, "what": req.what, "status": "met" if found else "missing",
               "from": _where(found) if found else None, "why_not": why_not}
        evidence.append(row)
        if not found:
            missing.append({"requirement": req.name, "what": req.what,
                            "why": "; ".join(why_not) or f"the {req.layer} layer did not run",
                            "command": req.command})
    if profile == "selfcheck":
        ran_any = any(layer["status"] == "passed" for _, layer in layers)
        if not ran_any and not reasons:
            reasons.append("no layer ran here: nothing was checked")
        verdict = SELF_CHECK_FAIL if reasons else SELF_CHECK_PASS
    else:
        verdict = "NO-GO" if reasons else "INCOMPLETE" if missing else "GO"
    return {"verdict": verdict, "exit_code": EXIT_CODES[verdict], "reasons": reasons,
            "evidence": evidence, "missing": missing}


class RunsDisagree(ValueError):
    """Runs that cannot be judged together (other kernel builds, candidates or servers)."""


def _identity(run: dict) -> dict | None:
    for records in run.get("measurements", {}).values():
        for r in records:
            if r.get("kind") == "server-identity":
                return {k: v for k, v in r.items() if k != "kind"}
    return None


def check_runs_agree(runs: list[dict]) -> None:
    """Raises RunsDisagree naming the mismatch when the runs judged different kernel builds,
    different ``--kernel`` candidates or different servers (by their identity)."""
    def differ(label: str, values: dict[str, object]) -> None:
        if len({repr(v) for v in values.values()}) > 1:
            listing = "; ".join(f"{where}: {value}" for where, value in values.items())
            raise RunsDisagree(f"the runs are of different {label} ({listing}): not judged together")

    differ("kernel builds (install the same kdtree-gate wheel on every host)",
           {_where(r): r.get("environment", {}).get("kernel_build") for r in runs})
    differ("kernel candidates (--kernel)",
           {_where(r): r.get("options", {}).get("kernel") or "kdtree" for r in runs})
    servers = {_where(r): _identity(r) for r in runs if r.get("options", {}).get("endpoint")}
    differ("server identities", servers)
