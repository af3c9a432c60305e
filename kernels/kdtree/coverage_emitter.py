"""Emitting coverage records from inside a serving process.

Each record is logged once at WARNING on the ``kdtree`` logger (SGLang loads plugins
before it configures logging, so INFO would be lost; WARNING reaches stderr through
Python's last-resort handler until then) and, when KDTREE_STATUS_DIR is set, written as
one JSON file there.
"""

from __future__ import annotations

import itertools
import logging
import os
import time
from pathlib import Path

from kdtree import __version__
from kdtree.coverage_record import CoverageRecord

logger = logging.getLogger("kdtree")

START_ID_VAR = "KDTREE_START_ID"
_file_seq = itertools.count()


def start_id() -> str:
    """This server start's id. The first process to ask (SGLang's launcher loads plugins
    before it spawns workers) creates it and exports it, so its workers inherit it.
    UTC time first, so later starts sort after earlier ones."""
    existing = os.environ.get(START_ID_VAR)
    if existing:
        return existing
    now = time.time()
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)) + f".{int(now % 1 * 1e6):06d}Z"
    new = f"{stamp}-p{os.getpid()}"
    os.environ[START_ID_VAR] = new
    return new


def current_tp() -> tuple[int | None, int | None]:
    """(tp_rank, tp_size) from SGLang's runtime context, None for what is not known yet
    (before SGLang publishes the ranks, or outside a scheduler process)."""
    try:
        from sglang.srt.runtime_context import get_parallel
    except Exception:
        return None, None
    parallel = get_parallel()
    values = []
    for name in ("tp_rank", "tp_size"):
        try:
            values.append(int(getattr(parallel, name)))
        except Exception:
            values.append(None)
    return values[0], values[1]


def make_record(event: str, hook: str, detail: str = "", build: str = "none") -> CoverageRecord:
    rank, tp_size = current_tp()
    return CoverageRecord(
        event=event, hook=hook, rank=rank, tp_size=tp_size, pid=os.getpid(),
        start=start_id(), version=__version__, build=build, detail=detail,
    )


def emit(record: CoverageRecord, status_dir: Path | None = None) -> None:
    """Log the record at WARNING and, if ``status_dir`` is given, write it as JSON there
    (atomically: a reader never sees a partial file)."""
    logger.warning(record.to_line())
    if status_dir is None:
        return
    status_dir.mkdir(parents=True, exist_ok=True)
    name = f"kdtree-{record.start}-{record.pid}-{record.hook}-{next(_file_seq)}.json"
    tmp = status_dir / (name + ".tmp")
    tmp.write_text(record.to_json() + "\n")
    os.replace(tmp, status_dir / name)
