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


def test_verify_settings():
    s = Settings.from_env({"KDTREE_VERIFY": "validate", "KDTREE_CAPTURE_DIR": "/tmp/cap",
                           "KDTREE_CAPTURE_MAX": "3", "KDTREE_CAPTURE_EVERY": "5"})
    assert (s.verify, str(s.capture_dir), s.capture_max, s.capture_every) == ("validate", "/tmp/cap", 3, 5)
    assert Settings.from_env({}).verify == "off"


@pytest.mark.parametrize("env, message", [
    ({"KDTREE_VERIFY": "maybe"}, "KDTREE_VERIFY must be one of off|validate|on, got 'maybe'"),
    ({"KDTREE_VERIFY": "off", "KDTREE_CAPTURE_DIR": "/x"}, "KDTREE_CAPTURE_DIR needs KDTREE_VERIFY"),
    ({"KDTREE_VERIFY": "on", "KDTREE_CAPTURE_MAX": "0"}, "KDTREE_CAPTURE_MAX must be an integer >= 1, got 0"),
    ({"KDTREE_VERIFY": "on", "KDTREE_CAPTURE_EVERY": "x"}, "KDTREE_CAPTURE_EVERY must be an integer"),
])
def test_bad_verify_settings_are_named(env, message):
    with pytest.raises(ValueError, match=message.replace("|", r"\|").replace("(", r"\(")):
        Settings.from_env(env)
