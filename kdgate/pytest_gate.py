"""The gate's pytest plugin: options, layer markers and shared fixtures. It is registered
through the ``pytest11`` entry point ``kdtree_gate``, so it is active wherever kdtree-gate is
installed (a checkout's editable install too) and the layer suites run from any folder
(``pytest --pyargs kdgate_suites -m kernel``).

Option names are unprefixed (``--endpoint``, ``--kernel``, ...) as the documented commands
use them; pytest refuses to start when two plugins add the same option, and CI starts pytest
with common plugins installed beside this one to catch a collision.

Each test's outcome is recorded in ``--gate-data`` with what it judged (``judges``):
``gate`` for tests marked ``gate_selfcheck`` (negative controls, perturbed servers, the
gate's own spawned workers) and for live tests run against the embedded server;
``deployment`` otherwise (kdgate.verdict).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kdgate.shipped import data_dir

GPU_LAYERS = ("kernel", "graph", "perf", "gpu")
MARKERS = {
    "kernel": "kernel parity, determinism and bad-input tests (needs a CUDA GPU)",
    "graph": "CUDA-graph capture and replay tests (needs a CUDA GPU)",
    "allocator": "SGLang allocator contiguity and invariants under churn (CPU)",
    "coverage": "per-rank patch coverage records (CPU, or a server's log)",
    "live": "generation snapshots against a running server (embedded by default)",
    "perf": "kernel benchmarks against a committed baseline (needs a CUDA GPU)",
    "gpu": "needs a CUDA GPU; skipped with a reason elsewhere",
    "gate_selfcheck": "checks the gate's own machinery (negative controls, fault servers, the gate's "
                      "own workers): never cutover evidence",
}


@dataclass(frozen=True)
class GateOptions:
    endpoint: str | None
    api_key: str | None = field(repr=False)  # never printed
    tp_size: int | None
    server_log: str | None
    journal_unit: str | None
    since: str | None
    status_dir: str | None
    wait_ready_s: float
    expect_hooks: tuple[str, ...]

    @property
    def has_coverage_source(self) -> bool:
        return bool(self.server_log or self.journal_unit or self.status_dir)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kdtree-gate")
    group.addoption("--endpoint", default=None,
                    help="URL of a running server for the live layer (default: start the "
                         "embedded llama.cpp server)")
    group.addoption("--api-key", default=os.environ.get("KDTREE_API_KEY"),
                    help="bearer token for --endpoint (default $KDTREE_API_KEY); never printed")
    group.addoption("--tp-size", type=int, default=None,
                    help="tensor-parallel size the coverage check expects (default: from "
                         "the server's /server_info when --endpoint is given)")
    group.addoption("--server-log", default=None,
                    help="server log file to read [kdtree] coverage records from")
    group.addoption("--journal-unit", default=None,
                    help="systemd unit whose journal holds the coverage records")
    group.addoption("--since", default=None,
                    help="with --journal-unit: passed to journalctl --since")
    group.addoption("--status-dir", default=None,
                    help="directory of the plugin's JSON coverage records (KDTREE_STATUS_DIR)")
    group.addoption("--wait-ready", type=float, default=0.0, metavar="SECONDS",
                    help="wait up to SECONDS for the server to generate before the live layer")
    group.addoption("--kernel", default=None, metavar="SPEC",
                    help="the kernel under test: kdtree (default, the shipped kernel), "
                         "triton (SGLang's), module:callable or file.py:callable")
    group.addoption("--fixtures-dir", action="append", default=[], metavar="DIR",
                    help="extra directory of captured verify calls (manifest.json + "
                         "safetensors, as written by KDTREE_CAPTURE_DIR); repeatable")
    group.addoption("--tie-eps", type=float, default=0.10, metavar="NATS",
                    help="near-tie threshold of the tie-aware rule (default 0.10, clamped to "
                         "[0.05, 0.25]; --calibrate-ties N suggests one for a server)")
    group.addoption("--request-timeout", type=float, default=600.0, metavar="SECONDS",
                    help="the longest the live layer waits for any one answer (default 600)")
    group.addoption("--systemd-unit", default=None,
                    help="with --wait-ready: the server's systemd unit; waiting stops at once "
                         "when it is failed or inactive")
    group.addoption("--passkey-mode", choices=("auto", "absolute", "relative"), default="auto",
                    help="absolute: every pass key found; relative: none the stored snapshot "
                         "found may be lost; auto (default): absolute on SGLang servers, "
                         "relative elsewhere (the embedded SmolLM2 misses some keys)")
    group.addoption("--churn-requests", type=int, default=200, metavar="N",
                    help="requests in the live churn (default 200)")
    group.addoption("--churn-concurrency", type=int, default=32, metavar="N",
                    help="churn requests in flight at once (default 32)")
    group.addoption("--churn-abort-fraction", type=float, default=0.12, metavar="F",
                    help="share of churn requests closed mid-stream (default 0.12)")
    group.addoption("--accept-margin", type=float, default=0.10, metavar="F",
                    help="largest allowed relative drop of the mean speculative acceptance "
                         "below the snapshot's (default 0.10)")
    group.addoption("--calibrate-ties", type=int, default=0, metavar="N",
                    help="rerun the canonical prompts N times, measure the logprob noise and "
                         "print a suggested --tie-eps")
    group.addoption("--gate-data", default=None, metavar="FILE",
                    help="write the run's measurements (notes and structured figures) to FILE "
                         "as JSON (the nightly report reads it)")
    group.addoption("--perf-baseline", default=None, metavar="FILE",
                    help="perf baseline the perf layer compares with (default: the committed one of "
                         "this GPU model, baselines/perf-<model>-wgmma.json, e.g. perf-h200-wgmma.json)")
    group.addoption("--perf-matrix", default="ci", metavar="NAME",
                    help="benchmark matrix of the perf layer: ci (default), full or smoke")
    group.addoption("--perf-tolerance", type=float, default=0.10, metavar="F",
                    help="largest allowed relative drop of a case's fraction of roofline (default 0.10)")
    group.addoption("--snapshot-dir", default=os.environ.get("KDGATE_SNAPSHOT_DIR") or "snapshots",
                    metavar="DIR",
                    help="where the live layer looks for snapshots first and writes them under "
                         "--snapshot-update (default ./snapshots, $KDGATE_SNAPSHOT_DIR); a snapshot not "
                         "found there is read from the reference snapshots shipped with kdtree-gate")
    group.addoption("--expect-hooks", default="defrag-sort",
                    help="comma-separated hooks every rank must report effective "
                         "(default: defrag-sort)")


@pytest.fixture(scope="session")
def gate_options(pytestconfig: pytest.Config) -> GateOptions:
    opt = pytestconfig.getoption
    hooks = tuple(h.strip() for h in opt("--expect-hooks").split(",") if h.strip())
    if not hooks:
        raise pytest.UsageError("--expect-hooks must name at least one hook")
    if opt("--tp-size") is not None and opt("--tp-size") < 1:
        raise pytest.UsageError(f"--tp-size must be >= 1, got {opt('--tp-size')}")
    return GateOptions(
        endpoint=opt("--endpoint"), api_key=opt("--api-key"), tp_size=opt("--tp-size"),
        server_log=opt("--server-log"), journal_unit=opt("--journal-unit"),
        since=opt("--since"), status_dir=opt("--status-dir"),
        wait_ready_s=opt("--wait-ready"), expect_hooks=hooks,
    )


def _cuda_missing_reason() -> str | None:
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA GPU on this host (torch.cuda.is_available() is False)"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """GPU layers are skipped with the reason when this host has no CUDA GPU: reported
    as not run, never as passed. Without --endpoint, tests of the live server judge the
    embedded server: marked gate_selfcheck."""
    if not config.getoption("--endpoint"):
        for item in items:
            if "live_client" in getattr(item, "fixturenames", ()):
                item.add_marker(pytest.mark.gate_selfcheck)
    gpu_items = [i for i in items if any(i.get_closest_marker(m) for m in GPU_LAYERS)]
    if not gpu_items:
        return
    reason = _cuda_missing_reason()
    if reason:
        for item in gpu_items:
            item.add_marker(pytest.mark.skip(reason=f"not run: {reason}"))


def gpu_for_worker(worker: str | None, device_count: int) -> int | None:
    """The visible CUDA device an xdist worker (``gw0``, ``gw1``, ...) runs on: worker K
    on device K mod count, so N workers on N GPUs get one GPU each. None outside xdist
    or without a visible device. CUDA_VISIBLE_DEVICES decides which devices are visible."""
    if not worker or not worker.startswith("gw") or not worker[2:].isdigit() or device_count < 1:
        return None
    return int(worker[2:]) % device_count


def check_option_values(config: pytest.Config) -> None:
    """Bad option values stop the run before anything starts, naming the option."""
    opt = config.getoption
    for name, low, high in (("--churn-requests", 1, None), ("--churn-concurrency", 1, None),
                            ("--calibrate-ties", 0, None), ("--request-timeout", 1, None)):
        value = opt(name)
        if value < low or (high is not None and value > high):
            raise pytest.UsageError(f"{name} must be >= {low}, got {value}")
    for name in ("--churn-abort-fraction", "--accept-margin"):
        if not 0.0 <= opt(name) < 1.0:
            raise pytest.UsageError(f"{name} must be in [0, 1), got {opt(name)}")
    if opt("--systemd-unit") and opt("--wait-ready") <= 0:
        raise pytest.UsageError("--systemd-unit is used while waiting: give --wait-ready SECONDS too")


def pytest_configure(config: pytest.Config) -> None:
    """Markers are registered, option values checked; under pytest-xdist each worker gets its
    own GPU (see gpu_for_worker)."""
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    check_option_values(config)
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        return
    try:
        import torch
    except ImportError:
        return
    device = gpu_for_worker(worker, torch.cuda.device_count() if torch.cuda.is_available() else 0)
    if device is not None:
        torch.cuda.set_device(device)


SHIPPED_FIXTURES = data_dir("fixtures")


def fixture_entries(config: pytest.Config) -> list[tuple[Path, str]]:
    """(directory, capture name) for the shipped fixtures and every --fixtures-dir. A
    directory whose manifest cannot be read yields one entry named '<manifest>' so the
    test reports the problem instead of silently collecting nothing."""
    from kdgate.fixtures import FixtureError, read_manifest

    out = []
    for directory in [SHIPPED_FIXTURES, *map(Path, config.getoption("--fixtures-dir"))]:
        try:
            out += [(directory, e["name"]) for e in read_manifest(directory)["captures"]]
        except FixtureError:
            out.append((directory, "<manifest>"))
    return out


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Tests that take ``candidate`` run against the --kernel candidate; its name is in
    the test id (``[kernel=NAME]``). Tests that take ``fixture_entry`` run once per
    captured verify call."""
    if "fixture_entry" in metafunc.fixturenames:
        entries = fixture_entries(metafunc.config)
        metafunc.parametrize("fixture_entry", entries,
                             ids=[f"{d.name}/{n}" for d, n in entries])
    if "candidate" in metafunc.fixturenames:
        spec = metafunc.config.getoption("--kernel") or "kdtree"
        metafunc.parametrize("candidate", [spec], ids=[f"kernel={spec}"], indirect=True,
                             scope="session")


@pytest.fixture(scope="session")
def candidate(request):
    from kdgate.candidates import resolve

    try:
        return resolve(request.param)
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from exc


@pytest.fixture(scope="session")
def cuda_device() -> "torch.device":
    import torch

    return torch.device("cuda", torch.cuda.current_device())


@pytest.fixture(scope="session")
def tie_eps(pytestconfig) -> float:
    from kdgate.tie_rule import clamp_eps

    return clamp_eps(pytestconfig.getoption("--tie-eps"))


@pytest.fixture(scope="session")
def live_client(gate_options, gate_notes, gate_data, pytestconfig):
    """A client for the server the live layer judges: --endpoint (after --wait-ready), or
    the embedded llama.cpp server started here and stopped at the end of the session."""
    from kdgate.live_client import LiveClient
    from kdgate.readiness import wait_ready

    if gate_options.endpoint:
        client = LiveClient(gate_options.endpoint, gate_options.api_key,
                            timeout_s=pytestconfig.getoption("--request-timeout"))
        if gate_options.wait_ready_s > 0:
            wait_ready(client, gate_options.wait_ready_s,
                       systemd_unit=pytestconfig.getoption("--systemd-unit"))
        gate_notes.append(f"live layer against {gate_options.endpoint}")
        gate_data.append({"kind": "server-identity", **client.identity()})
        client.fail_fast = True     # ready: from now on one hang or drop stops the layer
        yield client
        return
    from kdgate.embedded_server import EmbeddedServer, EmbeddedServerUnavailable

    try:
        server = EmbeddedServer()
    except EmbeddedServerUnavailable as exc:
        pytest.skip(f"not run: no --endpoint and {exc}")
    with server as client:
        gate_notes.append(f"live layer against the embedded server {server.url} ({server.model.name})")
        gate_data.append({"kind": "server-identity", **client.identity()})
        client.fail_fast = True
        yield client


@pytest.fixture(autouse=True)
def _live_request_site(request):
    """Names the running test on the live client, so that a server that stops answering is
    reported with the test and request where it stopped."""
    if "live_client" in request.fixturenames:
        request.getfixturevalue("live_client").where = request.node.nodeid
    yield


_NOTES_KEY = pytest.StashKey[list]()


@pytest.fixture(scope="session")
def gate_notes(pytestconfig: pytest.Config) -> list[str]:
    """Lines a layer wants in the run's summary (measured tables): append to this list."""
    return pytestconfig.stash.setdefault(_NOTES_KEY, [])


_DATA_KEY = pytest.StashKey[list]()


@pytest.fixture(scope="session")
def gate_data(pytestconfig: pytest.Config) -> list[dict]:
    """Structured figures a layer wants in the nightly report (one dict per figure, with a
    ``kind`` naming it): append to this list."""
    return pytestconfig.stash.setdefault(_DATA_KEY, [])


_WORKER_OUTPUT = "kdgate_notes_and_data"
_OUTCOMES_KEY = pytest.StashKey[dict]()
_PHASE_RANK = {"passed": 0, "skipped": 1, "failed": 2}


def pytest_runtest_logreport(report) -> None:
    """Each test's outcome (the worst of its phases) and what it judged, for --gate-data. On
    the controller only under pytest-xdist (workers' reports reach it)."""
    config = _CONFIG.get("config")
    if config is None or hasattr(config, "workerinput"):
        return
    outcome = "failed" if report.failed else "skipped" if report.skipped else "passed"
    if report.when != "call" and outcome == "passed":
        outcome = None
    outcomes = config.stash.setdefault(_OUTCOMES_KEY, {})
    record = outcomes.setdefault(report.nodeid, {
        "kind": "test-outcome", "test": report.nodeid, "outcome": "passed",
        "judges": "gate" if "gate_selfcheck" in report.keywords else "deployment"})
    if outcome and _PHASE_RANK[outcome] > _PHASE_RANK[record["outcome"]]:
        record["outcome"] = outcome
        if outcome == "skipped" and isinstance(report.longrepr, tuple):
            record["message"] = str(report.longrepr[2]).removeprefix("Skipped: ")[:300]


_CONFIG: dict = {}


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    _CONFIG["config"] = session.config


def pytest_sessionfinish(session: pytest.Session, exitstatus) -> None:
    """Writes --gate-data. An xdist worker hands its notes and figures to the controller
    instead (as JSON: no object that cannot cross is lost), which writes them all."""
    import json

    config = session.config
    if hasattr(config, "workeroutput"):
        config.workeroutput[_WORKER_OUTPUT] = json.dumps(
            {"notes": config.stash.get(_NOTES_KEY, []), "data": config.stash.get(_DATA_KEY, [])}, default=str)
        return
    path = config.getoption("--gate-data")
    if not path:
        return
    command = {"kind": "layer-command", "args": list(config.invocation_params.args),
               "api_key": "given" if config.getoption("--api-key") else None}
    records = [command, *config.stash.get(_DATA_KEY, []), *config.stash.get(_OUTCOMES_KEY, {}).values()]
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps({"notes": session.config.stash.get(_NOTES_KEY, []),
                                      "data": records}, indent=1, default=str))


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """pytest-xdist, on the controller: a finished worker's notes and figures join the run's
    (the terminal summary and --gate-data show every worker's)."""
    import json

    handed = getattr(node, "workeroutput", {}).get(_WORKER_OUTPUT)
    if handed:
        received = json.loads(handed)
        node.config.stash.setdefault(_NOTES_KEY, []).extend(received["notes"])
        node.config.stash.setdefault(_DATA_KEY, []).extend(received["data"])


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    notes = config.stash.get(_NOTES_KEY, [])
    if notes:
        terminalreporter.section("kdtree-gate measurements")
        for line in notes:
            terminalreporter.write_line(line)
