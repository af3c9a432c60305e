"""Coverage layer, end to end on CPU: 8 worker processes started the way SGLang starts
its TP schedulers (spawn, gloo group, SGLang's parallel context, load_plugins() first,
SGLang's real allocator), and the checker run on what they logged.

Every fault case breaks one rank the way deployments break and must make the checker
fail naming that rank.
"""

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from kdgate.coverage import check_coverage
from kdgate.record_sources import parse_lines, read_log_file, read_status_dir

pytestmark = [pytest.mark.coverage, pytest.mark.gate_selfcheck]  # the gate's own workers

TP = 8
HOOKS = ("defrag-sort",)
FAULT_CASES = {  # name: (fault, rank, what the checker must say)
    "plugin-raises": ("plugin-raises", 3, r"failed: rank 3 .*plugin-load.*KDTREE_DEFRAG_SORT"),
    "no-defrag-env": ("no-defrag-env", 5, r"no record at all: 5\b"),
    "plugin-excluded": ("plugin-excluded", 6, r"no record at all: 6\b"),
    "hooks-twice": ("hooks-twice", 2, r"defrag-sort effective 2 times on rank 2\b"),
    "silent": ("silent", 7, r"no record at all: 7\b"),
}


@dataclass
class Launch:
    log: Path
    status_dir: Path
    returncode: int

    def text(self) -> str:
        return self.log.read_text()


def launch(root: Path, name: str, faults=(), extra_env=None) -> Launch:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("KDTREE_") and k != "SGLANG_PLUGINS"}
    status_dir = root / f"{name}-status"
    env.update(KDTREE_DEFRAG_SORT="1", KDTREE_STATUS_DIR=str(status_dir), **(extra_env or {}))
    log = root / f"{name}.log"
    args = [sys.executable, "-m", "kdgate.tp_workers", "--tp-size", str(TP)]
    for rank, fault in faults:
        args += ["--fault", f"{rank}={fault}"]
    with log.open("w") as fh:
        done = subprocess.run(args, stderr=fh, stdout=fh, env=env, timeout=300)
    return Launch(log, status_dir, done.returncode)


@pytest.fixture(scope="module")
def launches(tmp_path_factory):
    """All launches, in this order (start ids grow with time)."""
    root = tmp_path_factory.mktemp("tp")
    out = {"first-complete": launch(root, "first-complete")}
    for case, (fault, rank, _) in FAULT_CASES.items():
        out[case] = launch(root, case, [(rank, fault)])
    out["strict-raises"] = launch(root, "strict-raises", [(4, "plugin-raises")],
                                  {"KDTREE_STRICT": "1"})
    out["last-complete"] = launch(root, "last-complete")
    return out


def verdict_of(launch_: Launch):
    records, unreadable = read_log_file(launch_.log)
    return check_coverage(records, TP, HOOKS, str(launch_.log), unreadable)


def test_every_rank_reports_every_hook_once(launches, gate_data):
    run = launches["last-complete"]
    assert run.returncode == 0, run.text()
    verdict = verdict_of(run)
    gate_data.append({"kind": "coverage-grid", "label": "8 spawned TP workers (CPU)", **verdict.figures()})
    assert verdict.passed, verdict.summary()
    assert verdict.grid == {(rank, "defrag-sort"): 1 for rank in range(TP)}


def test_status_dir_holds_the_same_records(launches):
    run = launches["last-complete"]
    records, unreadable = read_status_dir(run.status_dir)
    verdict = check_coverage(records, TP, HOOKS, str(run.status_dir), unreadable)
    assert verdict.passed, verdict.summary()
    assert sorted(r.rank for r in records) == list(range(TP))


def test_records_carry_the_workers_identity(launches):
    records, _ = read_log_file(launches["last-complete"].log)
    assert len({r.pid for r in records}) == TP
    assert len({r.start for r in records}) == 1
    assert all(r.tp_size == TP and r.version and r.event == "effective" for r in records)


def test_latest_start_is_isolated_in_a_log_of_many_starts(launches):
    combined = "".join(launches[name].text() for name in launches)
    records, unreadable = parse_lines(combined.splitlines(), "combined")
    verdict = check_coverage(records, TP, HOOKS, "combined", unreadable)
    assert verdict.passed, verdict.summary()
    assert verdict.earlier_starts == len(launches) - 1


@pytest.mark.parametrize("case", FAULT_CASES)
def test_fault_fails_the_check_naming_the_rank(launches, case):
    _, rank, pattern = FAULT_CASES[case]
    verdict = verdict_of(launches[case])
    assert not verdict.passed, f"{case}: checker passed\n{verdict.summary()}"
    assert re.search(pattern, verdict.summary()), verdict.summary()
    others = [p for p in verdict.problems if re.search(r"rank\(?s?\)? (\d+)", p)
              and str(rank) not in p]
    assert not others, f"problems about other ranks: {others}"


def test_earlier_start_mixed_in_cannot_hide_a_missing_rank(launches):
    """A complete earlier start's lines, interleaved with a start where rank 7 is silent:
    a grep over the log sees all 8 ranks; the checker must not."""
    old = launches["first-complete"].text().splitlines()
    new = launches["silent"].text().splitlines()
    mixed = [line for pair in zip(old, new) for line in pair] + old[len(new):] + new[len(old):]
    assert {f"rank={r}" for r in range(TP)} <= {m.group(0) for line in mixed
                                                for m in [re.search(r"rank=\d", line)] if m}
    records, unreadable = parse_lines(mixed, "mixed")
    verdict = check_coverage(records, TP, HOOKS, "mixed", unreadable)
    assert not verdict.passed
    assert re.search(r"no record at all: 7\b", verdict.summary()), verdict.summary()


def test_strict_mode_turns_a_plugin_failure_into_a_failed_startup(launches):
    run = launches["strict-raises"]
    assert run.returncode != 0, run.text()
    assert "PluginLoadFailed" in run.text() and "startup aborted" in run.text()
    verdict = verdict_of(run)
    assert re.search(r"failed: rank 4 .*plugin-load", verdict.summary()), verdict.summary()
