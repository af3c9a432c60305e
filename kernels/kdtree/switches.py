"""The kernel library's compile switches (``-D`` names), mirroring ``csrc/switches.h``.

Each :class:`Switch` is a name, a kind (``fault``: a negative control the gate requires to
fail; ``format``: fixes a per-call choice; ``ab``: turns one shipped optimisation off for
same-run timing) and what it changes. The shipped build defines none of them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

KINDS = ("fault", "format", "ab")


@dataclass(frozen=True)
class Switch:
    name: str
    kind: str
    what: str


SWITCHES: tuple[Switch, ...] = (
    Switch("KDTREE_FAULT_MASK_SHIFT", "fault", "the tree mask is read one column off"),
    Switch("KDTREE_FAULT_DROP_SPLIT", "fault", "the first KV split never writes its partial state"),
    Switch("KDTREE_FAULT_NO_RESCALE", "fault", "the wgmma kernels never rescale O when a row maximum rises"),
    Switch("KDTREE_FAULT_SHORT_LAYOUT_UNMARKED", "fault", "the short layout leaves its unused splits unmarked"),
    Switch("KDTREE_FAULT_BATCH_LAYOUT_UNMARKED", "fault", "the batch layout leaves a request's unused slots unmarked"),
    Switch("KDTREE_FAULT_GRID_LAYOUT_MERGES_ALL", "fault", "the combine merges every slot of a batch that kept the grid"),
    Switch("KDTREE_FAULT_PARTIAL_UNSCALED", "fault", "fp16 partial chunks are stored at one fixed scale"),
    Switch("KDTREE_FAULT_CALL_FORMAT_IGNORED", "fault", "the combine reads every partial state as fp16"),
    Switch("KDTREE_PARTIALS_FP16", "format", "the rows kernel's split calls always write fp16 partial states"),
    Switch("KDTREE_PARTIALS_FP32", "format", "the rows kernel's split calls always write fp32 partial states"),
    Switch("KDTREE_SERIAL_LAUNCH", "ab", "ordinary launches instead of programmatic dependent ones"),
    Switch("KDTREE_MAIN_NO_TRIGGER", "ab", "a main kernel never lets the combine launch before its epilogue"),
    Switch("KDTREE_NO_EARLY_PREFETCH", "ab", "no L2 prefetch of the request's indptr lines before the wait"),
    Switch("KDTREE_NO_BALANCE", "ab", "batches get neither the batch layout nor the balanced grid"),
    Switch("KDTREE_NO_BATCH_LAYOUT", "ab", "every batch keeps the grid's own layout and reads no lengths"),
    Switch("KDTREE_NO_SHORT_LAYOUT", "ab", "one-request calls of 33-64 rows never take the short layout"),
    Switch("KDTREE_ROWS_SERIAL", "ab", "no seesaw kernel: every 64-row CTA runs tile after tile"),
    Switch("KDTREE_SEESAW_ROWS_ONLY", "ab", "the seesaw kernel from 256 rows at every batch size"),
    Switch("KDTREE_ROWS_NO_COPIER", "ab", "the rows kernel never runs its copying warpgroup"),
    Switch("KDTREE_ROW_MAX_EVERY_TILE", "ab", "the rows kernel exchanges row maxima on every tile"),
    Switch("KDTREE_EAGER_RESCALE", "ab", "the running maximum moves on every rise (no rescale margin)"),
    Switch("KDTREE_COMBINE_CHUNKS_ONLY", "ab", "the combine never uses its row kernel"),
    Switch("KDTREE_COMBINE_LOOKUP_AFTER_WAIT", "ab", "the combine looks up its request only after the wait"),
)

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
    for path in sorted(p for p in root.rglob("*") if p.suffix in (".cu", ".cuh", ".h")):
        text = path.read_text()
        for m in _CONDITION.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            for name in _NAME.findall(m.group(1)):
                found.setdefault(name, []).append(f"{path.relative_to(root)}:{line}")
    return found


def by_name(name: str) -> Switch:
    """The registered switch ``name``; raises KeyError naming the registry."""
    for switch in SWITCHES:
        if switch.name == name:
            return switch
    raise KeyError(f"{name} is not a kdtree compile switch (kdtree/switches.py, csrc/switches.h)")
