"""The kernel under test: the shipped kernel by default, or any callable that follows the
contract (SGLang ``extend_attention_fwd``'s positional/keyword form, writing ``o``).

``--kernel`` takes ``kdtree`` (default), ``triton`` (SGLang's own Triton kernel),
``package.module:callable`` or ``path/to/file.py:callable``.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Callable


@dataclass(frozen=True)
class Candidate:
    name: str                    # shown in test ids and the report
    fn: Callable                 # extend_attention_fwd form
    writes_lse: bool             # honours lse_extend=
    debug_checks: bool           # honours debug_checks= (host + device index checks)
    static_checks: bool          # raises TypeError/ValueError on malformed arguments

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)


def shipped() -> Candidate:
    from kdtree.verify_op import tree_verify_fwd

    return Candidate("kdtree", tree_verify_fwd, writes_lse=True, debug_checks=True,
                     static_checks=True)


def sglang_triton() -> Candidate:
    from kdgate.baselines import triton_extend_attention

    return Candidate("triton", triton_extend_attention, writes_lse=True, debug_checks=False,
                     static_checks=False)


def _load_callable(spec: str) -> Callable:
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr:
        raise ValueError(f"--kernel must be 'kdtree', 'triton', 'module:callable' or "
                         f"'file.py:callable', got {spec!r}")
    if target.endswith(".py"):
        path = Path(target)
        if not path.is_file():
            raise ValueError(f"--kernel {spec!r}: no file {path}")
        module_spec = importlib.util.spec_from_file_location(f"kdgate_candidate_{path.stem}", path)
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(target)
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ValueError(f"--kernel {spec!r}: {target} has no callable {attr!r}")
    return fn


def resolve(spec: str | None) -> Candidate:
    """The candidate named by ``spec`` (None: the shipped kernel). A callable may carry
    ``writes_lse``/``debug_checks``/``static_checks`` attributes to declare what it offers
    (absent: False), so the tests that need them are skipped with a reason."""
    if spec in (None, "", "kdtree"):
        return shipped()
    if spec == "triton":
        return sglang_triton()
    fn = _load_callable(spec)
    return Candidate(spec, fn, writes_lse=bool(getattr(fn, "writes_lse", False)),
                     debug_checks=bool(getattr(fn, "debug_checks", False)),
                     static_checks=bool(getattr(fn, "static_checks", False)))
