"""Readiness waits: bounded, progress shown, immediate failure when the process died."""

import subprocess
import sys
import time

import pytest

from kdgate.fault_servers import fault_server, free_port
from kdgate.live_client import LiveClient
from kdgate.readiness import NotReady, wait_ready


def test_gives_up_in_time_with_the_last_status_and_progress():
    lines = []
    client = LiveClient(f"http://127.0.0.1:{free_port()}", timeout_s=2)
    started = time.monotonic()
    with pytest.raises(NotReady, match=r"within 3s; last status: .*connection refused"):
        wait_ready(client, 3, progress=lines.append, progress_every_s=1, poll_s=0.2)
    assert time.monotonic() - started < 10
    assert lines and "waiting for" in lines[0] and "last status" in lines[0]


def test_fails_at_once_when_the_server_process_exited():
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(3)"])
    proc.wait()
    client = LiveClient(f"http://127.0.0.1:{free_port()}", timeout_s=2)
    started = time.monotonic()
    with pytest.raises(NotReady, match="exited with code 3"):
        wait_ready(client, 60, process=proc)
    assert time.monotonic() - started < 5


def test_a_server_answering_500_never_counts_as_ready():
    with fault_server("http-500") as (url, _):
        with pytest.raises(NotReady, match="HTTP 500"):
            wait_ready(LiveClient(url, timeout_s=2), 2, poll_s=0.2)


def test_default_progress_goes_to_stderr_and_leaves_stdout_alone(capfd):
    # stdout belongs to the caller (a report, JSON, a child process's pid read by its parent)
    client = LiveClient(f"http://127.0.0.1:{free_port()}", timeout_s=2)
    with pytest.raises(NotReady):
        wait_ready(client, 2, progress_every_s=0.5, poll_s=0.2)
    out, err = capfd.readouterr()
    assert out == ""
    assert "waiting for" in err
