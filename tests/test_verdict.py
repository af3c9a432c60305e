"""The verdict by profile (kdgate.verdict) and the ``kdtree-gate verdict`` command over several
runs; the report escapes what it prints; the API key never reaches a layer's command line;
the committed example reports are what the current code renders."""

import html.parser
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kdgate.nightly import cli
from kdgate.nightly_report import write_report
from kdgate.verdict import CUTOVER_EVIDENCE, RunsDisagree, check_runs_agree, evaluate

ROOT = Path(__file__).resolve().parent.parent


def layer(name, status="passed", tests=(), reasons=()):
    return {"name": name, "status": status, "passed": sum(t[1] == "passed" for t in tests),
            "failed": sum(t[1] == "failed" for t in tests), "skipped": sum(t[1] == "skipped" for t in tests),
            "wall_s": 1.0, "reasons": list(reasons), "failures": [],
            "tests": [{"test": f"suites/{name}/test_x.py::{t[0]}", "outcome": t[1], "judges": t[2]} for t in tests]}


def run(*layers, endpoint=None, build="abc123def456", host="h", identity=None):
    out = {"schema": 2, "layers": list(layers), "options": {"endpoint": endpoint, "kernel": None},
           "environment": {"host": host, "kernel_build": build}, "measurements": {}}
    if identity:
        out["measurements"]["live"] = [{"kind": "server-identity", **identity}]
    return out


KERNEL = layer("kernel", tests=[("test_parity[a]", "passed", "deployment"), ("test_fixture_parity[f/x]", "passed", "deployment"),
                                ("test_broken_kernel_fails_parity[m]", "passed", "gate")])
GRAPH = layer("graph", tests=[("test_replay_matches_eager_on_new_inputs", "passed", "deployment")])
LIVE = layer("live", tests=[("test_generations_match_the_snapshot", "passed", "deployment")])
COVERAGE = layer("coverage", tests=[("test_deployment_coverage", "passed", "deployment"),
                                    ("test_every_rank_reports_every_hook_once", "passed", "gate")])
CPU_SELFCHECK = run(layer("allocator", tests=[("test_defrag_patch_improves_contiguity", "passed", "deployment")]),
                    layer("kernel", "not run", reasons=["12 x not run: no CUDA GPU on this host"]),
                    layer("live", tests=[("test_generations_match_the_snapshot", "passed", "gate")]),
                    layer("coverage", tests=[("test_every_rank_reports_every_hook_once", "passed", "gate"),
                                             ("test_deployment_coverage", "skipped", "deployment")]))


def test_every_cutover_requirement_met_is_go():
    result = evaluate([run(KERNEL, GRAPH, LIVE, COVERAGE, endpoint="http://h:1")], "cutover")
    assert (result["verdict"], result["exit_code"], result["missing"]) == ("GO", 0, [])


def test_a_cpu_run_is_a_self_check_never_go_and_names_what_cutover_needs():
    result = evaluate([CPU_SELFCHECK], "selfcheck")
    assert (result["verdict"], result["exit_code"]) == ("SELF-CHECK PASS", 0)
    assert [m["requirement"] for m in result["missing"]] == ["kernel", "graph", "live", "deployment coverage"]
    cutover = evaluate([CPU_SELFCHECK], "cutover")
    assert (cutover["verdict"], cutover["exit_code"]) == ("INCOMPLETE", 3)
    live = next(m for m in cutover["missing"] if m["requirement"] == "live")
    assert "embedded server" in live["why"] and "--endpoint" in live["command"]


def test_an_endpoint_run_without_gpu_or_records_is_incomplete_naming_each_gap():
    result = evaluate([run(LIVE, layer("kernel", "not run"), endpoint="http://h:1")], "cutover")
    assert result["verdict"] == "INCOMPLETE"
    assert [m["requirement"] for m in result["missing"]] == ["kernel", "graph", "deployment coverage"]
    assert all(m["command"].startswith(("on a GPU host", "kdtree-gate")) for m in result["missing"])


def test_any_failure_is_no_go_even_of_the_gates_own_checks():
    broken = layer("allocator", "failed", tests=[("test_broken_allocator_is_caught", "failed", "gate")],
                   reasons=["a double free went unnoticed"])
    result = evaluate([run(KERNEL, GRAPH, LIVE, COVERAGE, broken, endpoint="http://h:1")], "cutover")
    assert result["verdict"] == "NO-GO" and result["exit_code"] == 1
    assert "a double free went unnoticed" in result["reasons"][0]
    assert evaluate([run(broken)], "selfcheck")["verdict"] == "SELF-CHECK FAIL"


def test_gate_tests_and_skipped_fixtures_are_no_evidence():
    only_controls = layer("kernel", tests=[("test_broken_kernel_fails_parity[m]", "passed", "gate")])
    skipped_fixture = layer("kernel", tests=[("test_parity[a]", "passed", "deployment"),
                                             ("test_fixture_parity[mine/x]", "skipped", "deployment")])
    for kernel in (only_controls, skipped_fixture):
        result = evaluate([run(kernel, GRAPH, LIVE, COVERAGE, endpoint="http://h:1")], "cutover")
        assert result["verdict"] == "INCOMPLETE" and result["missing"][0]["requirement"] == "kernel"


def test_evidence_from_two_hosts_combines():
    gpu = run(KERNEL, GRAPH, host="gpu")
    cpu = run(LIVE, COVERAGE, endpoint="http://h:1", host="cpu")
    assert evaluate([gpu], "cutover")["verdict"] == "INCOMPLETE"
    combined = evaluate([gpu, cpu], "cutover")
    assert combined["verdict"] == "GO"
    assert {row["requirement"]: row["from"] for row in combined["evidence"]} == {
        "kernel": "gpu", "graph": "gpu", "live": "cpu", "deployment coverage": "cpu"}


def test_runs_of_other_builds_candidates_or_servers_are_refused():
    check_runs_agree([run(KERNEL, host="a"), run(LIVE, host="b")])
    with pytest.raises(RunsDisagree, match="kernel builds"):
        check_runs_agree([run(KERNEL, host="a"), run(LIVE, host="b", build="0123456789ab")])
    other = run(KERNEL, host="b")
    other["options"]["kernel"] = "triton"
    with pytest.raises(RunsDisagree, match="candidates"):
        check_runs_agree([run(KERNEL, host="a"), other])
    with pytest.raises(RunsDisagree, match="server identities"):
        check_runs_agree([run(LIVE, endpoint="u", host="a", identity={"model": "m1"}),
                          run(LIVE, endpoint="u", host="b", identity={"model": "m2"})])


def write_run(folder: Path, summary: dict) -> Path:
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps(summary))
    return folder


def test_verdict_command_exit_codes(tmp_path, capsys):
    gpu = write_run(tmp_path / "gpu", run(KERNEL, GRAPH, host="gpu"))
    cpu = write_run(tmp_path / "cpu", run(LIVE, COVERAGE, endpoint="http://h:1", host="cpu"))
    other = write_run(tmp_path / "other", run(LIVE, COVERAGE, endpoint="http://h:1", host="cpu", build="ffffffffffff"))
    assert cli(["verdict", str(gpu)]) == 3
    assert cli(["verdict", str(gpu), str(cpu), "--report-dir", str(tmp_path / "combined")]) == 0
    assert "kdtree-gate verdict: **GO**" in (tmp_path / "combined" / "report.md").read_text()
    capsys.readouterr()
    assert cli(["verdict", str(gpu), str(other)]) == 2
    assert "refused" in capsys.readouterr().err
    assert cli(["verdict", str(tmp_path / "nothing")]) == 2


class Tags(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)


def test_the_html_report_escapes_every_value(tmp_path):
    evil = "<script>alert(1)</script>"
    kernel = layer("kernel", "failed", tests=[(f"test_fixture_parity[{evil}]", "failed", "deployment")],
                   reasons=[f"suites/kernel/test_fixtures.py::test_fixture_parity[{evil}]: `{evil}` | <img src=x onerror=alert(2)>"])
    kernel["failures"] = list(kernel["reasons"])
    summary = run(kernel, host=evil)
    summary.update(profile="cutover", required=[], repeat=1, flips=[], wall_s=1.0,
                   notes={"kernel": [f"fixture kdtree {evil}: 3 ULP", "```", evil]},
                   **evaluate([summary], "cutover"))
    page = write_report(tmp_path, summary, from_summary=True).read_text()
    parser = Tags()
    parser.feed(page)
    assert parser.tags.count("script") == 1          # the page's own load handler only
    assert "img" not in parser.tags
    assert "alert(1)" in page                         # shown, as text
    assert "<script>alert" not in (tmp_path / "report.md").read_text()


def test_the_api_key_reaches_a_layer_through_the_environment_only(tmp_path):
    """A real nightly run of the coverage layer with --api-key: the layer received the key
    (its plugin saw one) but the command line it recorded does not hold it."""
    secret = "kd-secret-8c1f"
    done = subprocess.run([sys.executable, "-m", "kdgate.nightly", "nightly", "--layers", "coverage",
                           "--api-key", secret, "--report-dir", str(tmp_path / "r")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    data = json.loads((tmp_path / "r" / "data" / "coverage.json").read_text())
    command = next(r for r in data["data"] if r["kind"] == "layer-command")
    assert command["api_key"] == "given", done.stdout[-2000:] + done.stderr[-2000:]
    assert secret not in " ".join(command["args"])
    assert secret not in (tmp_path / "r" / "summary.json").read_text()
    assert secret not in done.stdout + done.stderr


COMMITTED_REPORTS = sorted(p.parent for p in (ROOT / "docs").rglob("summary.json"))


@pytest.mark.parametrize("folder", COMMITTED_REPORTS, ids=[str(p.relative_to(ROOT)) for p in COMMITTED_REPORTS])
def test_committed_reports_are_what_the_code_renders(folder, tmp_path):
    copy = tmp_path / folder.name
    copy.mkdir()
    shutil.copy(folder / "summary.json", copy / "summary.json")
    assert cli(["report", str(copy)]) == 0
    for name in ("report.md", "report.html"):
        assert (copy / name).read_text() == (folder / name).read_text(), f"{folder / name} is stale: redraw it"


def test_every_cutover_requirement_says_how_to_supply_it():
    for req in CUTOVER_EVIDENCE:
        assert req.command and req.what and req.layer in ("kernel", "graph", "live", "coverage")
