"""The patch's environment variables, parsed once, with errors that name the variable.

KDTREE_DEFRAG_SORT  0|1   force need_sort=True on SGLang's token allocators (default 0)
KDTREE_STRICT       0|1   a hook that fails aborts startup instead of logging (default 0)
KDTREE_STATUS_DIR   path  also write each coverage record as a JSON file there
KDTREE_START_ID     text  one server start's id; set by the first process that loads the
                          plugin (the launcher) and inherited by its workers
KDTREE_VERIFY       off|validate|on   the kernel in TritonAttnBackend's verify slot:
                          on serves it; validate runs SGLang's kernel AND this one, serves
                          SGLang's and compares by the parity rule; off (default) leaves
                          SGLang untouched
KDTREE_CAPTURE_DIR  path  (validate/on) write verify calls as fixtures there, one folder
                          per process; KDTREE_CAPTURE_MAX (default 16) calls at most,
                          every KDTREE_CAPTURE_EVERY-th eligible call (default 1)
KDTREE_VALIDATE_LOG_SECONDS  at most one mismatch report per this many seconds (default 60)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

_FLAG_VALUES = {"": False, "0": False, "1": True}


def parse_flag(env: Mapping[str, str], name: str) -> bool:
    """Read a 0|1 variable; unset or empty is 0. Raises ValueError naming ``name``."""
    raw = env.get(name, "").strip()
    if raw not in _FLAG_VALUES:
        raise ValueError(f"{name} must be 0 or 1, got {raw!r}")
    return _FLAG_VALUES[raw]


def strict_requested(env: Mapping[str, str] | None = None) -> bool:
    """KDTREE_STRICT, read so that it never raises: an unreadable value counts as strict
    (the operator asked for something; failing closed is the safe reading)."""
    env = os.environ if env is None else env
    try:
        return parse_flag(env, "KDTREE_STRICT")
    except ValueError:
        return True


VERIFY_MODES = ("off", "validate", "on")


def parse_int(env: Mapping[str, str], name: str, default: int, minimum: int = 1) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {raw!r}") from None
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value}")
    return value


@dataclass(frozen=True)
class Settings:
    defrag_sort: bool
    strict: bool
    status_dir: Path | None
    verify: str = "off"
    capture_dir: Path | None = None
    capture_max: int = 16
    capture_every: int = 1
    validate_log_seconds: int = 60

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "Settings":
        """Parse the variables above. Raises ValueError naming the first bad one."""
        env = os.environ if env is None else env
        status = env.get("KDTREE_STATUS_DIR", "").strip()
        verify = env.get("KDTREE_VERIFY", "").strip() or "off"
        if verify not in VERIFY_MODES:
            raise ValueError(f"KDTREE_VERIFY must be one of {'|'.join(VERIFY_MODES)}, got {verify!r}")
        capture = env.get("KDTREE_CAPTURE_DIR", "").strip()
        if capture and verify == "off":
            raise ValueError("KDTREE_CAPTURE_DIR needs KDTREE_VERIFY=validate or on "
                             "(the capture runs in the verify slot)")
        return cls(
            defrag_sort=parse_flag(env, "KDTREE_DEFRAG_SORT"),
            strict=parse_flag(env, "KDTREE_STRICT"),
            status_dir=Path(status) if status else None,
            verify=verify,
            capture_dir=Path(capture) if capture else None,
            capture_max=parse_int(env, "KDTREE_CAPTURE_MAX", 16),
            capture_every=parse_int(env, "KDTREE_CAPTURE_EVERY", 1),
            validate_log_seconds=parse_int(env, "KDTREE_VALIDATE_LOG_SECONDS", 60, minimum=0),
        )
