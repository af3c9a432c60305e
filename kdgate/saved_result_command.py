"""The frame of a ``kdtree-gate`` command that reads one saved benchmark result
(``kdtree-gate targets BENCH_JSON``, ``kdtree-gate limits BENCH_JSON``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Callable


def run_on_saved_result(argv: list[str], command: str, usage: str, render: Callable[[dict], tuple[str, int]]) -> int:
    """Reads the one path in ``argv`` as JSON and prints ``render(result)``'s text, returning
    its exit code. Exit 2, with ``usage`` on stderr, when ``argv`` is not one path; exit 2,
    naming the file and the error, when it cannot be read or is not a benchmark result
    (render raising ValueError, KeyError or TypeError)."""
    if len(argv) != 1:
        print(f"usage: kdtree-gate {command} BENCH_JSON   {usage}", file=sys.stderr)
        return 2
    path = Path(argv[0])
    try:
        text, code = render(json.loads(path.read_text()))
    except (OSError, json.JSONDecodeError, ValueError, KeyError, TypeError) as exc:
        print(f"kdtree-gate {command}: {path} is not a readable benchmark result ({exc})", file=sys.stderr)
        return 2
    print(text)
    return code
