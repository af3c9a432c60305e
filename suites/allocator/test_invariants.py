"""Allocator layer: invariants after every operation of hypothesis-driven churn, on
SGLang's real allocators, patched and unpatched; broken allocators must be caught."""

import re

import pytest

from kdgate.allocator_invariants import run_invariant_machines

pytestmark = pytest.mark.allocator

PAGE_SIZES = (1, 16, 64)
ARMS = {"patched": {"KDTREE_DEFRAG_SORT": "1"}, "unpatched": {"KDTREE_DEFRAG_SORT": "0"}}
FAULTS = {  # fault -> (page size, the check that must catch it)
    "double-free": (1, "that a live request holds|holds the same slot twice"),
    "padding-slot": (1, "reserved slot"),
    "leaky-pages": (16, r"live \d+ \+ available \d+ != capacity"),
}


@pytest.fixture(scope="module")
def runs():
    jobs = [dict(page_size=ps, plugin_env=env) for ps in PAGE_SIZES for env in ARMS.values()]
    jobs += [dict(page_size=ps, plugin_env=ARMS["unpatched"], fault=f) for f, (ps, _) in FAULTS.items()]
    results = run_invariant_machines(jobs)
    return {(r.page_size, r.need_sort, r.fault): r for r in results}


@pytest.mark.parametrize("arm", ARMS)
@pytest.mark.parametrize("page_size", PAGE_SIZES)
def test_invariants_hold_under_churn(runs, page_size, arm):
    run = runs[(page_size, arm == "patched", None)]
    assert run.failure is None, run.failure


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.gate_selfcheck
def test_broken_allocator_is_caught(runs, fault):
    page_size, pattern = FAULTS[fault]
    run = runs[(page_size, False, fault)]
    assert run.failure is not None, f"{fault}: the invariant checks did not notice"
    assert re.search(pattern, run.failure), run.failure
