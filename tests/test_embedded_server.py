"""The embedded llama-server leaves no process behind: after a normal exit, after an
exception inside its ``with`` block, and after Ctrl-C in the process that started it."""

import os
import signal
import subprocess
import sys
import time

import pytest

from kdgate.embedded_server import EmbeddedServer, missing_packages

pytestmark = pytest.mark.skipif(bool(missing_packages()),
                                reason=f"not run: the embedded server needs {missing_packages()}")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:     # a zombie not yet reaped counts as gone
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_stopped_after_use_and_after_an_exception():
    server = EmbeddedServer()
    with server as client:
        pid = server.process.pid
        assert client.complete("The capital of France is", 4).steps
    assert not alive(pid)
    with pytest.raises(RuntimeError, match="boom"):
        with server as client:
            pid = server.process.pid
            raise RuntimeError("boom")
    assert not alive(pid)


def test_stopped_on_ctrl_c():
    # Ctrl-C as a terminal delivers it: Python's own SIGINT handler, even where this test
    # runs under a shell that started it in the background (SIGINT ignored, inherited)
    script = ("import signal, time\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
              "from kdgate.embedded_server import EmbeddedServer\n"
              "s = EmbeddedServer()\nwith s:\n    print(s.process.pid, flush=True)\n    time.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    pid = int(proc.stdout.readline())
    assert alive(pid)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    deadline = time.monotonic() + 15
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not alive(pid), "the server outlived the process that started it"
