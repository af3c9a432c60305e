"""The kernel library's compile switches (``-D`` names), as ``csrc/switches.h`` lists them
(the header is the registry; :func:`registry` reads it).

Each :class:`Switch` is a name, a kind (``fault``: a negative control the gate requires to
fail; ``format``: fixes a per-call choice; ``ab``: turns one shipped optimisation off for
same-run timing) and what it changes. The shipped build defines none of them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from kdtree import build

KINDS = ("fault", "format", "ab")


@dataclass(frozen=True)
class Switch:
    name: str
    kind: str
    what: str


HEADER = "switches.h"
_ENTRY = re.compile(r'X\((\w+),\s*(\w+),\s*"([^"]*)"\)')
_CONDITION = re.compile(r"^[ \t]*#[ \t]*(?:if|ifdef|ifndef|elif)\b(.*)$", re.M)
_NAME = re.compile(r"\bKDTREE_\w+")


def header_switches(source_dir: Path) -> tuple[Switch, ...]:
    """The table as ``source_dir``'s switches.h states it."""
    text = (Path(source_dir) / HEADER).read_text()
    return tuple(Switch(*m.groups()) for m in _ENTRY.finditer(text))


def tested_names(source_dir: Path) -> dict[str, list[str]]:
    """Every ``KDTREE_`` name an ``#if``/``#ifdef``/``#ifndef``/``#elif`` in ``source_dir``
    tests, with the ``file:line`` places that test it."""
    found: dict[str, list[str]] = {}
    root = Path(source_dir)
    for path in build.sources(root):
        text = path.read_text()
        for m in _CONDITION.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            for name in _NAME.findall(m.group(1)):
                found.setdefault(name, []).append(f"{path.relative_to(root)}:{line}")
    return found


@lru_cache(maxsize=1)
def registry() -> tuple[Switch, ...]:
    """The switches of the installed sources (build.source_dir())."""
    return header_switches(build.source_dir())


def by_name(name: str) -> Switch:
    """The registered switch ``name``; raises KeyError naming the registry."""
    for switch in registry():
        if switch.name == name:
            return switch
    raise KeyError(f"{name} is not a kdtree compile switch (csrc/switches.h)")
