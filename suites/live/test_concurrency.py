"""Live layer: concurrency invariance. Each canonical prompt alone, then again inside a
burst of >= 16 mixed-length requests in flight at once: equal under the tie-aware rule
(re-scoring after a near-tie split on the server itself)."""

from concurrent.futures import ThreadPoolExecutor

import pytest

from kdgate.generation_snapshot import rescore_stored
from kdgate.live_prompts import burst_fillers, canonical
from kdgate.tie_rule import compare_generations

pytestmark = pytest.mark.live
BURST = 16


def test_canonical_prompts_are_unchanged_inside_a_burst(live_client, tie_eps, gate_notes, gate_data):
    prompts = canonical()
    alone = {p.id: live_client.complete(p.text, p.max_tokens) for p in prompts}
    burst = prompts + burst_fillers(max(BURST - len(prompts), 10), seed=1)
    with ThreadPoolExecutor(max_workers=len(burst)) as pool:
        futures = {p.id: pool.submit(live_client.complete, p.text, p.max_tokens) for p in burst}
        together = {pid: f.result() for pid, f in futures.items()}
    failures = []
    for p in prompts:
        verdict = compare_generations(alone[p.id].steps, together[p.id].steps, tie_eps,
                                      rescore=lambda k, p=p: rescore_stored(live_client, p.text, alone[p.id].steps, k))
        gate_data.append(verdict.figures("concurrency", p.id, len(alone[p.id].steps)))
        if not verdict.passed:
            failures.append(f"{p.id}: {verdict.report()}")
    gate_notes.append(f"live concurrency: {len(prompts)} canonical prompts alone vs inside a burst of "
                      f"{len(burst)} requests: {len(prompts) - len(failures)} equal under the tie rule")
    assert not failures, "\n".join(failures)

