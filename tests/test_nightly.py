"""The nightly command: layer verdicts from JUnit files, go/no-go, options, flips, and one
real run (allocator layer + the kernel layer, which cannot run on a CPU host) whose report
is then opened in headless Chromium."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from junitparser import Failure, JUnitXml, Skipped, TestCase, TestSuite

from kdgate.layer_results import LayerResult, flips, read_layer
from kdgate.nightly import parse_args

ROOT = Path(__file__).resolve().parent.parent


def junit(tmp_path, cases) -> Path:
    suite = TestSuite("pytest")
    for name, outcome, message in cases:
        case = TestCase(name, classname="suites.x.test_x")
        if outcome == "failed":
            case.result = [Failure(message)]
        elif outcome == "skipped":
            case.result = [Skipped(message)]
        suite.add_testcase(case)
    xml = JUnitXml()
    xml.add_testsuite(suite)
    path = tmp_path / "x.xml"
    xml.write(str(path))
    return path


def test_a_layer_with_a_failure_failed(tmp_path):
    path = junit(tmp_path, [("a", "passed", ""), ("b", "failed", "assert 3 <= 1\nmore")])
    r = read_layer("kernel", path, 1, 2.0)
    assert r.status == "failed" and r.failures == ["suites.x.test_x::b: assert 3 <= 1"]


def test_a_layer_where_everything_skipped_did_not_run_and_says_why(tmp_path):
    path = junit(tmp_path, [("a", "skipped", "not run: no CUDA GPU on this host"),
                            ("b", "skipped", "not run: no CUDA GPU on this host")])
    r = read_layer("kernel", path, 0, 1.0)
    assert r.status == "not run" and r.reasons == ["2 x not run: no CUDA GPU on this host"]


def test_passed_needs_a_passing_test(tmp_path):
    path = junit(tmp_path, [("a", "passed", ""), ("b", "skipped", "not run: no endpoint")])
    assert read_layer("live", path, 0, 1.0).status == "passed"


def test_no_report_is_a_failure_unless_nothing_was_collected(tmp_path):
    missing = tmp_path / "none.xml"
    assert read_layer("live", missing, 4, 0.5, "ERROR: --churn-requests must be >= 1\n").status == "failed"
    assert read_layer("live", missing, 5, 0.5).status == "not run"


def test_flips_are_listed():
    runs = [{"t::a": "passed", "t::b": "passed"}, {"t::a": "passed", "t::b": "failed"}]
    assert flips(runs) == ["t::b: passed / failed"]


@pytest.mark.parametrize("argv, message", [
    (["--layers", "kernel,gpus"], "unknown layer"),
    (["--layers", "allocator", "--require", "kernel"], "not being run"),
    (["--repeat", "0"], "--repeat must be >= 1"),
])
def test_bad_options_are_named(argv, message, capsys):
    with pytest.raises(SystemExit):
        parse_args(argv)
    assert message in capsys.readouterr().err


@pytest.fixture(scope="module")
def nightly_run(tmp_path_factory):
    """One real nightly run from a folder outside the checkout: the allocator layer (runs on
    CPU) and the kernel layer (cannot run without a GPU), with the kernel layer required: a
    SELF-CHECK FAIL on a CPU host (the selfcheck profile: no --endpoint)."""
    report = tmp_path_factory.mktemp("nightly")
    done = subprocess.run([sys.executable, "-m", "kdgate.nightly", "nightly", "--layers", "allocator,kernel",
                           "--require", "kernel", "--report-dir", "report"],
                          cwd=report, capture_output=True, text=True, timeout=900)
    return done, report / "report"


def test_nightly_reports_a_layer_that_could_not_run_and_fails_a_required_one(nightly_run):
    done, report = nightly_run
    if done.returncode not in (0, 1):
        pytest.fail(done.stdout[-3000:] + done.stderr[-3000:])
    summary = json.loads((report / "summary.json").read_text())
    layers = {layer["name"]: layer for layer in summary["layers"]}
    assert summary["profile"] == "selfcheck"
    assert layers["allocator"]["status"] == "passed" and layers["allocator"]["passed"] > 0
    if layers["kernel"]["status"] == "not run":          # a CPU host
        assert done.returncode == 1 and summary["verdict"] == "SELF-CHECK FAIL"
        assert summary["reasons"] == ["kernel: required but not run"]
        assert any("no CUDA GPU" in r for r in layers["kernel"]["reasons"])
    judged = {t["test"].split("::")[-1].split("[")[0]: t["judges"] for t in layers["allocator"]["tests"]}
    assert judged["test_defrag_patch_improves_contiguity"] == "deployment"
    assert judged["test_negative_control_same_assertion_fails_with_patch_off"] == "gate"
    assert "figures/allocator-fragmentation.png" in summary["figures"]
    assert (report / "junit" / "allocator.xml").is_file() and (report / "report.md").is_file()
    assert "runs_per_1k_tokens" in json.dumps(summary["measurements"]["allocator"])


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def test_the_report_renders_in_a_real_browser(nightly_run, tmp_path):
    done, report = nightly_run
    browser = chromium()
    if browser is None:
        message = "not run: no chromium on PATH (Debian package chromium)"
        if os.environ.get("KDGATE_REQUIRE_BROWSER") == "1":
            pytest.fail(message)
        pytest.skip(message)
    page = (report / "report.html").resolve()
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000"]
    dom = subprocess.run([browser, *flags, "--dump-dom", page.as_uri()], capture_output=True,
                         text=True, timeout=120)
    assert 'data-verdict="' in dom.stdout, dom.stderr[-2000:]
    summary = json.loads((report / "summary.json").read_text())
    assert f'data-verdict="{summary["verdict"]}"' in dom.stdout
    assert f"kdtree-gate nightly: <strong>{summary['verdict']}</strong>" in dom.stdout
    total = dom.stdout.split('data-images-total="')[1].split('"')[0]
    loaded = dom.stdout.split('data-images-loaded="')[1].split('"')[0]
    assert int(total) >= 1 and loaded == total, f"{loaded} of {total} pictures loaded"
    shot = tmp_path / "report.png"
    subprocess.run([browser, *flags, "--window-size=1200,1600", f"--screenshot={shot}", page.as_uri()],
                   capture_output=True, timeout=120)
    assert shot.is_file() and shot.stat().st_size > 10_000


def test_the_h200_perf_report_redraws_its_figure_from_its_data(tmp_path):
    """The committed H200 perf-layer report (real measurements) drawn again by
    ``kdtree-gate report``: the speedup / fraction-of-roofline figure comes back."""
    from kdgate.nightly import cli

    report = tmp_path / "nightly-h200-perf"
    shutil.copytree(ROOT / "docs" / "nightly-h200-perf", report)
    (report / "figures" / "perf-speedup.png").unlink()
    assert cli(["report", str(report)]) == 0
    summary = json.loads((report / "summary.json").read_text())
    assert summary["verdict"] == "SELF-CHECK PASS" and summary["figures"] == ["figures/perf-speedup.png"]
    assert (report / "figures" / "perf-speedup.png").read_bytes()[:4] == b"\x89PNG"
    perf = summary["measurements"]["perf"]
    assert len([r for r in perf if r.get("kind") == "perf"]) == 29
    assert "figures/perf-speedup.png" in (report / "report.md").read_text()
