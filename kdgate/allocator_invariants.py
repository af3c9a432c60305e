"""Allocator invariants under hypothesis-driven churn.

A hypothesis state machine drives one real SGLang allocator through random sequences
of prefills, decode steps and frees (finish or abort, any order) and checks after EVERY
operation: no slot handed out twice while live, the padding slot/page never handed out,
live + available == capacity; and when everything is freed (the ``free_all`` rule),
available == capacity.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from kdgate.allocator_driver import AllocatorDriver, make_allocator


@dataclass(frozen=True)
class InvariantRun:
    page_size: int
    plugin_env: tuple[tuple[str, str], ...]
    fault: str | None
    need_sort: bool
    examples: int
    failure: str | None     # None: every invariant held in every example


def run_invariant_machine(page_size: int, plugin_env: dict[str, str], *, fault: str | None = None,
                          pool_tokens: int = 2048, max_examples: int = 60,
                          steps: int = 60) -> InvariantRun:
    """Load plugins through SGLang's ``load_plugins()`` with ``plugin_env`` applied, then
    run the state machine (deterministic: derandomized). Meant for a fresh process."""
    os.environ.update(plugin_env)
    import torch
    from hypothesis import HealthCheck, settings
    from hypothesis import strategies as st
    from hypothesis.reporting import with_reporter
    from hypothesis.stateful import (RuleBasedStateMachine, invariant, precondition,
                                     rule, run_state_machine_as_test)
    from sglang.srt.plugins import load_plugins

    torch.set_num_threads(1)
    load_plugins()

    def build():
        if fault is None:
            return make_allocator(page_size, pool_tokens)
        from kdgate.faulty_allocators import make_faulty_allocator
        return make_faulty_allocator(fault, page_size, pool_tokens)

    need_sort = bool(build().need_sort)

    class AllocatorMachine(RuleBasedStateMachine):
        def __init__(self):
            super().__init__()
            self.driver = AllocatorDriver(build())
            self.next_rid = 0

        @rule(tokens=st.integers(1, pool_tokens // 3))
        def prefill(self, tokens):
            if self.driver.prefill(self.next_rid, tokens) is not None:
                self.next_rid += 1

        @precondition(lambda self: self.driver.requests)
        @rule(data=st.data())
        def decode(self, data):
            live = sorted(self.driver.requests)
            batch = data.draw(st.lists(st.sampled_from(live), min_size=1, unique=True))
            self.driver.decode(batch)

        @precondition(lambda self: self.driver.requests)
        @rule(data=st.data())
        def free_one(self, data):
            self.driver.release(data.draw(st.sampled_from(sorted(self.driver.requests))))

        @rule()
        def free_all(self):
            for rid in sorted(self.driver.requests):
                self.driver.release(rid)

        @invariant()
        def accounting_holds(self):
            self.driver.check_invariants()

        def teardown(self):  # no checks here: they would mask the failing step's error
            for rid in sorted(self.driver.requests):
                self.driver.release(rid)

    reported: list[str] = []
    failure = None
    config = settings(max_examples=max_examples, stateful_step_count=steps, deadline=None,
                      derandomize=True, database=None,
                      suppress_health_check=list(HealthCheck))
    try:
        with with_reporter(reported.append):
            run_state_machine_as_test(AllocatorMachine, settings=config)
    except Exception as exc:
        errors = exc.exceptions if isinstance(exc, BaseExceptionGroup) else [exc]
        failure = "\n".join(f"{type(e).__name__}: {e}" for e in errors)
        notes = [n for e in errors for n in getattr(e, "__notes__", [])]
        failure += "\n" + "\n".join([*notes, *map(str, reported)])
    return InvariantRun(page_size, tuple(sorted(plugin_env.items())), fault, need_sort,
                        max_examples, failure)


def run_invariant_machines(jobs: list[dict], workers: int = 2) -> list[InvariantRun]:
    """Run :func:`run_invariant_machine` for each kwargs dict in its own spawned process."""
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx, max_tasks_per_child=1) as pool:
        futures = [pool.submit(run_invariant_machine, **job) for job in jobs]
        return [f.result() for f in futures]
