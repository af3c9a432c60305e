"""The coverage checker's rules, on constructed records (the end-to-end run with real
worker processes is the coverage layer, suites/coverage)."""

import pytest

from kdgate.coverage import check_coverage
from kdgate.record_sources import RecordSourceError, read_log_file, read_status_dir
from kdtree.coverage_record import CoverageRecord

HOOKS = ("defrag-sort", "verify-override")


def rec(rank, hook="defrag-sort", event="effective", start="S2", tp_size=4, pid=None, detail=""):
    return CoverageRecord(event=event, hook=hook, rank=rank, tp_size=tp_size,
                          pid=1000 + rank if pid is None else pid,
                          start=start, version="0.1.0", detail=detail)


def complete(start="S2", tp=4):
    return [rec(r, h, start=start, tp_size=tp) for r in range(tp) for h in HOOKS]


def test_complete_start_passes_and_fills_the_grid():
    verdict = check_coverage(complete(), 4, HOOKS)
    assert verdict.passed, verdict.summary()
    assert set(verdict.grid.values()) == {1} and len(verdict.grid) == 8
    assert "rank  defrag-sort" in verdict.summary()


def test_only_the_latest_start_counts():
    old = [r for r in complete(start="S1") if r.rank != 2]      # an incomplete old start
    verdict = check_coverage(old + complete(start="S2"), 4, HOOKS)
    assert verdict.passed and verdict.start == "S2" and verdict.earlier_starts == 1
    newer_gap = [r for r in complete(start="S3") if r.rank != 1]
    verdict = check_coverage(complete(start="S2") + newer_gap, 4, HOOKS)
    assert not verdict.passed and "no record at all: 1" in verdict.summary()


@pytest.mark.parametrize("records, pattern", [
    ([r for r in complete() if not (r.rank == 2 and r.hook == "verify-override")],
     "hook verify-override not effective on rank(s) 2"),
    (complete() + [rec(1, "verify-override", pid=1001)], "effective 2 times on rank 1"),
    (complete() + [rec(3, "defrag-sort", "failed", detail="need_sort is False")],
     "failed: rank 3 (pid 1003) hook defrag-sort: need_sort is False"),
    (complete() + [rec(None, "plugin-load", "failed", pid=77, detail="boom")],
     "unknown rank (pid 77): failed plugin-load boom"),
    (complete() + [rec(9, pid=9)], "rank 9 outside 0..3"),
    ([r for r in complete()] + [rec(0, "extra", pid=55)], "rank 0 reported from 2 processes"),
    ([CoverageRecord(**{**rec(r, h).__dict__, "tp_size": 2}) for r in range(4) for h in HOOKS],
     "tp_size [2], expected 4"),
])
def test_each_gap_fails_and_says_where(records, pattern):
    verdict = check_coverage(records, 4, HOOKS)
    assert not verdict.passed
    assert pattern in verdict.summary(), verdict.summary()


def test_no_records_and_unreadable_records_fail():
    verdict = check_coverage([], 4, HOOKS, source="server.log")
    assert not verdict.passed and "no [kdtree] coverage records found in server.log" in verdict.summary()
    verdict = check_coverage(complete(), 4, HOOKS, unreadable=["log:7: token 'x' is not key=value"])
    assert not verdict.passed and "unreadable record: log:7" in verdict.summary()


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="tp_size must be >= 1"):
        check_coverage(complete(), 0, HOOKS)
    with pytest.raises(ValueError, match="hooks must name at least one"):
        check_coverage(complete(), 4, ())


def test_sources_report_what_is_missing(tmp_path):
    with pytest.raises(RecordSourceError, match="--server-log .*no such file"):
        read_log_file(tmp_path / "absent.log")
    with pytest.raises(RecordSourceError, match="--status-dir .*no such directory"):
        read_status_dir(tmp_path / "absent")


def test_log_and_status_dir_readers(tmp_path):
    log = tmp_path / "server.log"
    lines = ["INFO starting", *("[2026-11-29 TP%d] " % r.rank + r.to_line() for r in complete()),
             "[kdtree] event=effective hook=broken"]
    log.write_text("\n".join(lines) + "\n")
    records, unreadable = read_log_file(log)
    assert records == complete() and len(unreadable) == 1 and "server.log:10" in unreadable[0]
    status = tmp_path / "status"
    status.mkdir()
    for i, r in enumerate(complete()):
        (status / f"kdtree-{i}.json").write_text(r.to_json())
    (status / "kdtree-bad.json").write_text("{")
    records, unreadable = read_status_dir(status)
    assert sorted(records, key=lambda r: (r.rank, r.hook)) == complete()
    assert len(unreadable) == 1
