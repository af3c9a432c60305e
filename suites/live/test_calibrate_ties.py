"""Live layer, on request (--calibrate-ties N): the noise of this server's greedy
generations over N runs of the canonical prompts, alternately each prompt alone and all
of them inside a burst of other requests (a different burst each time), and a suggested
--tie-eps (kdgate.tie_calibration). Fails when this server's own reruns would fail the
tie rule: logprobs moving 0.5 nats or more before a split, or a split wider than 0.25."""

import pytest

from kdgate.live_burst import send_burst
from kdgate.live_prompts import burst_fillers, canonical
from kdgate.tie_calibration import calibrate
from kdgate.tie_rule import EPS_MAX, PREFIX_LOGPROB_TOL

pytestmark = pytest.mark.live


def test_calibrate_tie_eps(live_client, pytestconfig, gate_notes):
    reruns = pytestconfig.getoption("--calibrate-ties")
    if reruns < 2:
        pytest.skip("not run: calibration is asked for with --calibrate-ties N (N >= 2)")
    prompts = canonical()
    runs = []
    for k in range(reruns):
        if k % 2 == 0:
            runs.append({p.id: live_client.complete(p.text, p.max_tokens) for p in prompts})
        else:
            together = send_burst(live_client, prompts + burst_fillers(10, seed=100 + k))
            runs.append({p.id: together[p.id] for p in prompts})
    result = calibrate(runs)
    gate_notes.append(f"live tie calibration: {result.summary()}")
    print(result.summary())
    assert result.noise < PREFIX_LOGPROB_TOL, f"logprobs move {result.noise:.3f} nats between runs"
    assert result.widest_split <= EPS_MAX, (f"runs split at gaps up to {result.widest_split:.3f} nats "
                                            f"(over {EPS_MAX}): {result.splits[:5]}")
