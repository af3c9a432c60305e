"""Live layer: concurrency invariance. Every prompt of a burst (the canonical prompts and
mixed-length fillers, >= 16 requests in flight at once) is sent alone first; each one's
generation inside the burst must equal its solo run under the tie-aware rule (re-scoring
after a near-tie split on the server itself). No request of the burst goes unchecked."""

import pytest

from kdgate.generation_snapshot import judge_generations
from kdgate.live_burst import send_burst
from kdgate.live_prompts import burst_fillers, canonical

pytestmark = pytest.mark.live
BURST = 16


def test_every_request_is_unchanged_inside_a_burst(live_client, tie_eps, gate_notes, gate_data):
    prompts = canonical()
    burst = prompts + burst_fillers(max(BURST - len(prompts), 10), seed=1)
    alone = {p.id: live_client.complete(p.text, p.max_tokens).steps for p in burst}
    together = send_burst(live_client, burst)
    failures = judge_generations(live_client, burst, alone, together, tie_eps, "concurrency", gate_data)
    gate_notes.append(f"live concurrency: {len(burst)} requests ({len(prompts)} canonical, "
                      f"{len(burst) - len(prompts)} fillers) alone vs inside one burst: "
                      f"{len(burst) - len(failures)} equal under the tie rule")
    assert not failures, "\n".join(failures)
