"""Waiting until a server really generates (``--wait-ready SECONDS``).

Polls a one-token generation until one succeeds. Fails at once, with the reason, when the
server process the gate started has exited or the systemd unit it watches is failed or
inactive; otherwise fails when the time is up, naming the last error. Progress (elapsed,
last status) is reported every ``progress_every_s`` seconds, by default on stderr (stdout
stays the caller's: reports, JSON, a child's pid).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from typing import Callable

from kdgate.live_client import LiveClient, ServerError


def print_to_stderr(line: str) -> None:
    """The default progress sink: one line on stderr."""
    print(line, file=sys.stderr, flush=True)


class NotReady(RuntimeError):
    """The server did not become ready; the message says why."""


def unit_state(unit: str) -> str:
    """``systemctl is-active UNIT`` (active, activating, failed, inactive, ...)."""
    if shutil.which("systemctl") is None:
        raise NotReady("--systemd-unit needs systemctl, which is not on PATH here")
    done = subprocess.run(["systemctl", "is-active", unit], capture_output=True, text=True, timeout=30)
    return done.stdout.strip() or done.stderr.strip() or "unknown"


def wait_ready(client: LiveClient, seconds: float, process: subprocess.Popen | None = None,
               systemd_unit: str | None = None, progress: Callable[[str], None] = print_to_stderr,
               progress_every_s: float = 10.0, poll_s: float = 1.0) -> float:
    """Block until ``client`` completes a real generation; returns the seconds waited."""
    started = time.monotonic()
    last_status, last_progress = "not tried yet", started
    while True:
        elapsed = time.monotonic() - started
        if process is not None and process.poll() is not None:
            raise NotReady(f"the server process exited with code {process.returncode} after "
                           f"{elapsed:.0f}s (last status: {last_status})")
        if systemd_unit is not None:
            state = unit_state(systemd_unit)
            if state in ("failed", "inactive"):
                raise NotReady(f"systemd unit {systemd_unit} is {state} (after {elapsed:.0f}s)")
        try:
            client.generate_once(timeout_s=max(1.0, min(30.0, seconds - elapsed)))
            return time.monotonic() - started
        except ServerError as exc:
            last_status = str(exc)
        elapsed = time.monotonic() - started
        if elapsed >= seconds:
            raise NotReady(f"no successful generation within {seconds:g}s; last status: {last_status}")
        if time.monotonic() - last_progress >= progress_every_s:
            last_progress = time.monotonic()
            progress(f"waiting for {client.base_url}: {elapsed:.0f}s of {seconds:g}s, last status: {last_status}")
        time.sleep(poll_s)
