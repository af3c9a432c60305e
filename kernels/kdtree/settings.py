"""The patch's environment variables, parsed once, with errors that name the variable.

KDTREE_DEFRAG_SORT  0|1   force need_sort=True on SGLang's token allocators (default 0)
KDTREE_STRICT       0|1   a hook that fails aborts startup instead of logging (default 0)
KDTREE_STATUS_DIR   path  also write each coverage record as a JSON file there
KDTREE_START_ID     text  one server start's id; set by the first process that loads the
                          plugin (the launcher) and inherited by its workers
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


@dataclass(frozen=True)
class Settings:
    defrag_sort: bool
    strict: bool
    status_dir: Path | None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "Settings":
        """Parse the variables above. Raises ValueError naming the first bad one."""
        env = os.environ if env is None else env
        status = env.get("KDTREE_STATUS_DIR", "").strip()
        return cls(
            defrag_sort=parse_flag(env, "KDTREE_DEFRAG_SORT"),
            strict=parse_flag(env, "KDTREE_STRICT"),
            status_dir=Path(status) if status else None,
        )
