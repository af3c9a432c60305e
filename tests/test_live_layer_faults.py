"""The live layer's own faults: the snapshot test run for real (a pytest subprocess with
--snapshot-update, the worst case for stored data) against an endpoint that refuses
connections, answers 500, returns malformed JSON, accepts and never answers, or lists a
model and then dies at the first generation. Each must fail with the reason named, within
its bound, and leave every stored snapshot byte-for-byte as it was."""

import hashlib
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kdgate.fault_servers import fault_server, free_port

ROOT = Path(__file__).resolve().parent.parent
REQUEST_TIMEOUT_S = 5
BOUND_S = 90          # pytest start-up, SGLang/llama.cpp flavor probes, then the failure


def digests(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def run_snapshot_test(endpoint: str, snapshots: Path):
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "suites/live/test_snapshots.py::test_generations_match_the_snapshot",
         "-p", "no:cacheprovider", "-q", "--endpoint", endpoint, "--snapshot-update",
         "--request-timeout", str(REQUEST_TIMEOUT_S)],
        cwd=ROOT, capture_output=True, text=True, timeout=BOUND_S * 2,
        env={**__import__("os").environ, "KDGATE_SNAPSHOT_DIR": str(snapshots)})
    return done, time.monotonic() - started


@pytest.fixture
def snapshots(tmp_path) -> Path:
    copy = tmp_path / "snapshots"
    shutil.copytree(ROOT / "snapshots", copy)
    return copy


@pytest.mark.parametrize("behaviour, named", [
    ("refused", "connection refused"),
    ("http-500", "HTTP 500"),
    ("malformed-json", "not JSON"),
    ("hang", f"no answer within {REQUEST_TIMEOUT_S}s"),
    ("dies", "connection dropped by the server"),
])
def test_the_layer_fails_clearly_and_keeps_its_snapshots(snapshots, behaviour, named):
    before = digests(snapshots)
    if behaviour == "refused":
        done, wall = run_snapshot_test(f"http://127.0.0.1:{free_port()}", snapshots)
    else:
        with fault_server(behaviour) as (url, _):
            done, wall = run_snapshot_test(url, snapshots)
    output = done.stdout + done.stderr
    assert done.returncode == 1, output[-3000:]
    assert named in output, output[-3000:]
    assert wall < BOUND_S, f"took {wall:.0f}s (bound {BOUND_S}s)"
    assert digests(snapshots) == before, "a stored snapshot changed"
