"""A layer's verdict, read from the JUnit XML pytest wrote for it.

* passed   at least one test passed and none failed or errored;
* failed   any test failed or errored, or pytest stopped without a report (usage error,
           crash): the gate cannot say go;
* not run  nothing ran: every test was skipped (the skip reasons say why: no GPU, no
           endpoint...) or none was collected. Never counted as passed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from junitparser import Error, Failure, JUnitXml, Skipped

PYTEST_NO_TESTS = 5


@dataclass
class LayerResult:
    name: str
    status: str                       # "passed" | "failed" | "not run"
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    wall_s: float = 0.0
    reasons: list[str] = field(default_factory=list)     # why not run / what failed
    failures: list[str] = field(default_factory=list)    # "test id: first line of the message"
    tests: list[dict] = field(default_factory=list)       # {test, outcome, judges, message}: kdgate.verdict

    def to_json(self) -> dict:
        return dict(self.__dict__)


def _first_line(text: str | None) -> str:
    return (text or "").strip().splitlines()[0][:300] if (text or "").strip() else ""


def _cases(junit_path: Path):
    """(test id, "passed" | "failed" | "skipped", first line of the message) per test case."""
    for suite in JUnitXml.fromfile(str(junit_path)):
        for case in suite:
            results = list(case.result)
            bad = [r for r in results if isinstance(r, (Failure, Error))]
            skip = [r for r in results if isinstance(r, Skipped)]
            test_id = f"{case.classname}::{case.name}"
            if bad:
                yield test_id, "failed", _first_line(bad[0].message or bad[0].text)
            elif skip:
                yield test_id, "skipped", _first_line(skip[0].message) or "skipped"
            else:
                yield test_id, "passed", ""


def read_layer(name: str, junit_path: Path, exit_code: int, wall_s: float,
               log_tail: str = "") -> LayerResult:
    """The verdict of layer ``name`` from its JUnit file and pytest's exit code."""
    if not junit_path.is_file():
        if exit_code == PYTEST_NO_TESTS:
            return LayerResult(name, "not run", wall_s=wall_s, reasons=["no tests collected"])
        return LayerResult(name, "failed", wall_s=wall_s,
                           reasons=[f"pytest exited with code {exit_code} before writing a report: "
                                    f"{_first_line(log_tail[-600:]) or 'see its log'}"])
    result = LayerResult(name, "not run", wall_s=wall_s)
    skip_reasons: dict[str, int] = {}
    for test_id, outcome, message in _cases(junit_path):
        if outcome == "failed":
            result.failed += 1
            result.failures.append(f"{test_id}: {message}")
        elif outcome == "skipped":
            result.skipped += 1
            skip_reasons[message] = skip_reasons.get(message, 0) + 1
        else:
            result.passed += 1
    if result.failed or (exit_code not in (0, PYTEST_NO_TESTS) and not result.passed):
        result.status = "failed"
        result.reasons = result.failures[:20] or [f"pytest exited with code {exit_code}"]
    elif result.passed:
        result.status = "passed"
        result.reasons = [f"{n} skipped: {r}" for r, n in skip_reasons.items()]
    else:
        result.reasons = [f"{n} x {r}" for r, n in skip_reasons.items()] or ["no tests collected"]
    return result


def flips(runs: list[dict[str, str]]) -> list[str]:
    """Tests whose outcome differs between repeated runs (test id -> outcome per run)."""
    ids = sorted(set().union(*runs)) if runs else []
    out = []
    for test_id in ids:
        seen = [run.get(test_id, "absent") for run in runs]
        if len(set(seen)) > 1:
            out.append(f"{test_id}: " + " / ".join(seen))
    return out


def outcomes(junit_path: Path) -> dict[str, str]:
    """test id -> passed | failed | skipped, from one JUnit file (empty if missing)."""
    if not junit_path.is_file():
        return {}
    return {test_id: outcome for test_id, outcome, _ in _cases(junit_path)}
