"""Where coverage records come from: a log file, journald, or a status directory.

Each reader returns (records, unreadable): the parsed records in source order, and a
description of every line/file that started a record (``[kdtree] event=``) but did not parse.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from kdtree.coverage_record import MARKER, CoverageRecord, RecordFormatError


class RecordSourceError(RuntimeError):
    """The source itself could not be read (missing file, journalctl failing, ...)."""


def parse_lines(lines, origin: str) -> tuple[list[CoverageRecord], list[str]]:
    records, unreadable = [], []
    for number, line in enumerate(lines, 1):
        if MARKER not in line:
            continue
        try:
            record = CoverageRecord.from_line(line)
        except RecordFormatError as exc:
            unreadable.append(f"{origin}:{number}: {exc}")
            continue
        if record is not None:
            records.append(record)
    return records, unreadable


def read_log_file(path: str | Path) -> tuple[list[CoverageRecord], list[str]]:
    """Records from a server log (stderr of the launcher and its workers)."""
    path = Path(path)
    if not path.is_file():
        raise RecordSourceError(f"--server-log {path}: no such file")
    with path.open(encoding="utf-8", errors="replace") as fh:
        return parse_lines(fh, str(path))


def read_journal(unit: str, since: str | None = None, timeout_s: float = 60.0
                 ) -> tuple[list[CoverageRecord], list[str]]:
    """Records from ``journalctl -u UNIT [--since SINCE]``."""
    if shutil.which("journalctl") is None:
        raise RecordSourceError("--journal-unit needs journalctl, which is not on PATH here")
    cmd = ["journalctl", "-u", unit, "-o", "cat", "--no-pager"]
    if since:
        cmd += ["--since", since]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        raise RecordSourceError(f"journalctl -u {unit} took longer than {timeout_s:g}s") from exc
    if done.returncode != 0:
        raise RecordSourceError(f"journalctl -u {unit} failed ({done.returncode}): "
                                f"{done.stderr.strip()[:300]}")
    return parse_lines(done.stdout.splitlines(), f"journal:{unit}")


def read_status_dir(path: str | Path) -> tuple[list[CoverageRecord], list[str]]:
    """Records from the JSON files the plugin writes under KDTREE_STATUS_DIR."""
    path = Path(path)
    if not path.is_dir():
        raise RecordSourceError(f"--status-dir {path}: no such directory")
    records, unreadable = [], []
    for file in sorted(path.glob("kdtree-*.json")):
        try:
            records.append(CoverageRecord.from_json(file.read_text(encoding="utf-8")))
        except (RecordFormatError, OSError) as exc:
            unreadable.append(f"{file}: {exc}")
    return records, unreadable
