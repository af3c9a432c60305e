"""The coverage record's wire formats (line and JSON)."""

import pytest

from kdtree.coverage_record import CoverageRecord, RecordFormatError


def record(**over):
    base = dict(event="effective", hook="defrag-sort", rank=3, tp_size=8, pid=4242,
                start="20261129T081928.123456Z-p4100", version="0.1.0", build="none",
                detail="need_sort=True on PagedTokenToKVPoolAllocator(size=4096, page_size=16)")
    base.update(over)
    return CoverageRecord(**base)


def test_line_round_trip_and_greppable_fields():
    r = record()
    line = r.to_line()
    assert line.startswith("[kdtree] event=effective hook=defrag-sort rank=3 tp_size=8 pid=4242 ")
    assert CoverageRecord.from_line(line) == r


def test_unknown_rank_is_a_question_mark():
    r = record(rank=None, tp_size=None)
    assert " rank=? tp_size=? " in r.to_line()
    assert CoverageRecord.from_line(r.to_line()) == r


def test_prefixes_before_the_record_are_ignored():
    r = record(event="failed", detail="ValueError: KDTREE_DEFRAG_SORT must be 0 or 1, got 'yes'")
    for prefix in ("", "[2026-11-29 08:19:28 TP3] ", "Nov 29 08:19:28 host python[4242]: "):
        assert CoverageRecord.from_line(prefix + r.to_line()) == r


def test_json_round_trip():
    r = record(detail='quotes " and \' and spaces')
    assert CoverageRecord.from_json(r.to_json()) == r


@pytest.mark.parametrize("line", [
    "nothing to see",
    "kdtree.plugin.PluginLoadFailed: [kdtree] plugin failed to load",
    '    raise X(f"[kdtree] defrag-sort did not take")',
])
def test_lines_without_a_record_are_not_records(line):
    assert CoverageRecord.from_line(line) is None


@pytest.mark.parametrize("mutate, message", [
    (lambda l: l.replace(" pid=4242", ""), r"lacks field\(s\) \['pid'\]"),
    (lambda l: l.replace("rank=3", "rank=three"), "rank must be an integer or '\\?'"),
    (lambda l: l.replace("pid=4242", "pid=x"), "pid must be an integer"),
    (lambda l: l.replace("event=effective", "event=maybe"), "event must be one of"),
    (lambda l: l + " 'unbalanced", "unbalanced quoting"),
    (lambda l: l + " stray", "is not key=value"),
])
def test_malformed_lines_are_errors(mutate, message):
    with pytest.raises(RecordFormatError, match=message):
        CoverageRecord.from_line(mutate(record().to_line()))


@pytest.mark.parametrize("text, message", [
    ("not json", "not JSON"), ("[1, 2]", "must be a JSON object"),
    ('{"event": "effective"}', "lacks field"),
])
def test_malformed_json_is_an_error(text, message):
    with pytest.raises(RecordFormatError, match=message):
        CoverageRecord.from_json(text)
