"""SGLang plugin entry point (group ``sglang.srt.plugins``, name ``kdtree``).

SGLang's ``load_plugins()`` calls :func:`register` with no arguments in every process it
starts (launcher, each TP scheduler, detokenizer), before logging is configured and
before the scheduler publishes its ranks. ``register`` only registers hooks with SGLang's
``HookRegistry``; SGLang applies them right after. Hooks report through coverage records
(see :mod:`kdtree.coverage_record`) when they take effect, which in a scheduler is after
its ranks are known.

A failure while registering (a bad variable, a target that does not resolve) is re-raised
for SGLang to log, and reported as a ``failed`` record of hook ``plugin-load``. It is emitted when the process builds its
KV allocator, so the record names the rank; with KDTREE_STRICT=1 that construction then
raises and the server does not start (SGLang itself only logs exceptions raised by a
plugin's entry point, so raising from here could not stop it).
"""

from __future__ import annotations

import os
import pkgutil
from pathlib import Path

from kdtree import defrag, verify_override
from kdtree.coverage_emitter import emit, make_record, start_id
from kdtree.settings import Settings, strict_requested

LOAD_HOOK_NAME = "plugin-load"
# Every scheduler builds a KV allocator after publishing its ranks: a place that runs
# once per worker with the rank known.
REPORT_TARGET = "sglang.srt.mem_cache.allocator.base.BaseTokenToKVPoolAllocator.__init__"


class PluginLoadFailed(RuntimeError):
    """Raised at allocator construction under KDTREE_STRICT=1 when register() failed."""


def _resolve_owner(target: str) -> None:
    """Import the module/class that owns ``target`` (what HookRegistry will do), so a
    stale target fails here with a reason instead of in SGLang's log only."""
    owner, _, attr = target.rpartition(".")
    obj = pkgutil.resolve_name(owner)
    if not hasattr(obj, attr):
        raise AttributeError(f"{owner} has no attribute {attr!r}")


class LoadFailureReport:
    """AFTER hook on the allocator base ``__init__`` that reports a registration failure
    once, with the rank, and raises under strict mode."""

    def __init__(self, detail: str, strict: bool, status_dir: Path | None):
        self.detail = detail
        self.strict = strict
        self.status_dir = status_dir
        self._reported = False

    def report(self) -> None:
        if not self._reported:
            self._reported = True
            emit(make_record("failed", LOAD_HOOK_NAME, self.detail), self.status_dir)

    def __call__(self, result, *args, **kwargs):
        self.report()
        if self.strict:
            raise PluginLoadFailed(f"kdtree plugin failed to load: {self.detail}")
        return None


def _status_dir_from_env() -> Path | None:
    raw = os.environ.get("KDTREE_STATUS_DIR", "").strip()
    return Path(raw) if raw else None


def register() -> None:
    """Register the hooks the environment asks for (see :mod:`kdtree.settings`)."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    start_id()  # the launcher creates and exports it before spawning the workers
    try:
        settings = Settings.from_env()
        if settings.defrag_sort:
            for target in defrag.TARGETS:
                _resolve_owner(target)
            hook = defrag.DefragSortHook(settings.strict, settings.status_dir)
            for target in defrag.TARGETS:
                HookRegistry.register(target, hook, HookType.AFTER)
        if settings.verify != "off":
            _resolve_owner(verify_override.TARGET)
            capture = None
            if settings.capture_dir is not None:
                from kdtree.capture import CaptureWriter

                capture = CaptureWriter(settings.capture_dir, settings.capture_max,
                                        settings.capture_every, settings.verify)
            HookRegistry.register(verify_override.TARGET, verify_override.VerifyOverride(
                settings.verify, settings.strict, settings.status_dir, capture,
                settings.validate_log_seconds), HookType.AFTER)
    except Exception as exc:
        failure = LoadFailureReport(f"{type(exc).__name__}: {exc}", strict_requested(),
                                    _status_dir_from_env())
        try:
            _resolve_owner(REPORT_TARGET)
            HookRegistry.register(REPORT_TARGET, failure, HookType.AFTER)
        except Exception:
            failure.report()  # no later place to report from: say it now, rank unknown
        raise  # SGLang logs it with its traceback ("Failed to execute general plugin")
