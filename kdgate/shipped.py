"""Where the gate's shipped files are: the layer suites, the captured fixtures, the perf
baselines and the reference snapshots.

An installed wheel holds them inside the packages (``kdgate_suites/`` for the suites,
``kdgate/data/<name>/`` for the data); a checkout holds them at its root (``suites/``,
``fixtures/``, ``baselines/``, ``snapshots/``). The wheel's place is looked at first.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
CHECKOUT = PACKAGE.parent
DATA = ("fixtures", "baselines", "snapshots")


def data_dir(name: str) -> Path:
    """The shipped folder ``name`` (fixtures, baselines or snapshots)."""
    if name not in DATA:
        raise ValueError(f"data_dir: name must be one of {DATA}, got {name!r}")
    installed = PACKAGE / "data" / name
    return installed if installed.is_dir() else CHECKOUT / name


def suites_dir() -> Path:
    """The folder of the layer suites (one subfolder per pytest marker)."""
    checkout = CHECKOUT / "suites"
    if (checkout / "__init__.py").is_file() and (checkout / "kernel").is_dir():
        return checkout
    spec = importlib.util.find_spec("kdgate_suites")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the gate's layer suites are missing: neither a checkout's suites/ "
                                "nor the installed package kdgate_suites was found")
    return Path(list(spec.submodule_search_locations)[0])
