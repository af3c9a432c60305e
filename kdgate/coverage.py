"""The per-rank coverage check: did every hook take effect exactly once on every rank?

Given coverage records (``kdtree.coverage_record``) from a server's log, journald or a
status directory, the check keeps only the latest start (the greatest start id) and
requires, for that start: every rank 0..tp_size-1 × every expected hook ``effective``
exactly once; no ``failed`` record; no record with an unknown or out-of-range rank or a
different tp_size; one pid per rank.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from kdtree.coverage_record import CoverageRecord


@dataclass
class CoverageVerdict:
    passed: bool
    start: str | None
    tp_size: int
    hooks: tuple[str, ...]
    grid: dict[tuple[int, str], int]          # (rank, hook) -> effective count, latest start
    problems: list[str] = field(default_factory=list)
    earlier_starts: int = 0
    earlier_records: int = 0
    source: str = ""

    def figures(self) -> dict:
        """The verdict as plain JSON values: ranks x hooks counts for the latest start."""
        return {"passed": self.passed, "start": self.start, "tp_size": self.tp_size,
                "hooks": list(self.hooks), "source": self.source, "problems": list(self.problems),
                "grid": [[self.grid.get((rank, hook), 0) for hook in self.hooks]
                         for rank in range(self.tp_size)]}

    def summary(self) -> str:
        head = (f"coverage {'PASS' if self.passed else 'FAIL'} for start {self.start or '-'} "
                f"(tp_size {self.tp_size}, hooks {', '.join(self.hooks)}; source {self.source or '-'}; "
                f"{self.earlier_records} record(s) of {self.earlier_starts} earlier start(s) ignored)")
        return "\n".join([head, *(f"  - {p}" for p in self.problems), self.grid_table()])

    def grid_table(self) -> str:
        """ranks × hooks table of effective counts (1 is the only good value)."""
        width = max([len(h) for h in self.hooks] + [4])
        lines = ["  rank  " + "  ".join(h.ljust(width) for h in self.hooks)]
        for rank in range(self.tp_size):
            cells = [str(self.grid.get((rank, h), 0)).ljust(width) for h in self.hooks]
            lines.append(f"  {rank:>4}  " + "  ".join(cells))
        return "\n".join(lines)


def _ranks_text(ranks) -> str:
    return ", ".join(str(r) for r in sorted(ranks))


def check_coverage(records: list[CoverageRecord], tp_size: int, hooks: tuple[str, ...] | list[str],
                   source: str = "", unreadable: list[str] | None = None) -> CoverageVerdict:
    """Judge ``records`` for a deployment of ``tp_size`` ranks expecting ``hooks``.
    ``unreadable`` lists lines/files that carried the record prefix but did not parse;
    each is a problem (a record the checker cannot read is a record it cannot trust)."""
    if tp_size < 1:
        raise ValueError(f"tp_size must be >= 1, got {tp_size}")
    hooks = tuple(hooks)
    if not hooks:
        raise ValueError("hooks must name at least one expected hook")
    problems = [f"unreadable record: {u}" for u in (unreadable or [])]
    if not records:
        problems.append(f"no [kdtree] coverage records found in {source or 'the source'}: "
                        f"the plugin did not load, or its WARNING lines went elsewhere")
        return CoverageVerdict(False, None, tp_size, hooks, {}, problems, source=source)

    latest = max(r.start for r in records)
    current = [r for r in records if r.start == latest]
    earlier = [r for r in records if r.start != latest]

    unknown = [r for r in current if r.rank is None or not 0 <= r.rank < tp_size]
    for r in unknown:
        where = "unknown rank" if r.rank is None else f"rank {r.rank} outside 0..{tp_size - 1}"
        problems.append(f"{where} (pid {r.pid}): {r.event} {r.hook} {r.detail}".rstrip())
    wrong_size = sorted({r.tp_size for r in current if r.tp_size not in (None, tp_size)})
    if wrong_size:
        problems.append(f"records report tp_size {wrong_size}, expected {tp_size}")

    for r in current:
        if r.event == "failed" and r not in unknown:
            problems.append(f"failed: rank {r.rank} (pid {r.pid}) hook {r.hook}: {r.detail}")

    grid: dict[tuple[int, str], int] = Counter(
        (r.rank, r.hook) for r in current if r.event == "effective" and r.rank is not None)
    silent = [rank for rank in range(tp_size)
              if not any(r.rank == rank for r in current)]
    if silent:
        problems.append(f"ranks with no record at all: {_ranks_text(silent)} "
                        f"(plugin not loaded there, or their log lines are missing)")
    for hook in hooks:
        missing = [k for k in range(tp_size) if grid.get((k, hook), 0) == 0 and k not in silent]
        if missing:
            problems.append(f"hook {hook} not effective on rank(s) {_ranks_text(missing)}")
        for k in range(tp_size):
            if grid.get((k, hook), 0) > 1:
                problems.append(f"hook {hook} effective {grid[(k, hook)]} times on rank {k} "
                                f"(hooks registered more than once)")

    pids = defaultdict(set)
    for r in current:
        if r.rank is not None:
            pids[r.rank].add(r.pid)
    for rank, ps in sorted(pids.items()):
        if len(ps) > 1:
            problems.append(f"rank {rank} reported from {len(ps)} processes (pids {_ranks_text(ps)})")

    return CoverageVerdict(
        passed=not problems, start=latest, tp_size=tp_size, hooks=hooks, grid=dict(grid),
        problems=problems, earlier_starts=len({r.start for r in earlier}),
        earlier_records=len(earlier), source=source,
    )
