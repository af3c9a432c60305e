"""The patch's environment variables."""

import pytest

from kdtree.settings import Settings, parse_flag, strict_requested


@pytest.mark.parametrize("raw, value", [("", False), ("0", False), ("1", True), (" 1 ", True)])
def test_flags(raw, value):
    assert parse_flag({"X": raw}, "X") is value
    assert parse_flag({}, "X") is False


@pytest.mark.parametrize("raw", ["yes", "true", "2", "on"])
def test_bad_flag_names_the_variable(raw):
    with pytest.raises(ValueError, match=f"KDTREE_DEFRAG_SORT must be 0 or 1, got '{raw}'"):
        Settings.from_env({"KDTREE_DEFRAG_SORT": raw})


def test_settings_and_strict_fallback(tmp_path):
    s = Settings.from_env({"KDTREE_DEFRAG_SORT": "1", "KDTREE_STATUS_DIR": str(tmp_path)})
    assert s.defrag_sort and not s.strict and s.status_dir == tmp_path
    assert strict_requested({"KDTREE_STRICT": "1"}) is True
    assert strict_requested({"KDTREE_STRICT": "bogus"}) is True   # fail closed
    assert strict_requested({}) is False
