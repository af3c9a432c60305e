"""Live layer: churn, then re-check. The canonical prompts are answered alone; then
--churn-requests requests of log-uniform random lengths up to the context limit run at
--churn-concurrency in flight, --churn-abort-fraction of them closed mid-stream by the
client; then the server must still be healthy and the canonical prompts must come out
equal to the first pass under the tie-aware rule (a leak or corruption in the KV pool
after churn shows up here)."""

import math
import random
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from kdgate.generation_snapshot import rescore_stored
from kdgate.live_client import ServerError
from kdgate.live_prompts import canonical, churn_prompts
from kdgate.tie_rule import compare_generations

pytestmark = pytest.mark.live


def test_churn_then_the_canonical_prompts_again(live_client, context_limit, token_budget, tie_eps,
                                                gate_notes, gate_data, pytestconfig):
    count = pytestconfig.getoption("--churn-requests")
    in_flight = pytestconfig.getoption("--churn-concurrency")
    fraction = pytestconfig.getoption("--churn-abort-fraction")
    prompts = canonical()
    first = {p.id: live_client.complete(p.text, p.max_tokens) for p in prompts}

    churn = churn_prompts(count, token_budget, context_limit, seed=5)
    rng = random.Random(7)
    aborting = set(rng.sample(range(count), math.ceil(count * fraction)))
    after = {i: rng.randint(1, 3) for i in aborting}

    def one(i):
        p = churn[i]
        try:
            if i in aborting:
                return "aborted", live_client.stream_and_abort(p.text, 64, after[i])
            return "done", live_client.complete(p.text, p.max_tokens, top_logprobs=0).prompt_tokens
        except ServerError as exc:
            return "error", f"{p.id}: {exc}"

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=in_flight) as pool:
        outcomes = list(pool.map(one, range(count)))
    wall = time.monotonic() - started
    errors = [detail for kind, detail in outcomes if kind == "error"]
    closed = [read for kind, read in outcomes if kind == "aborted" and read >= 1]
    tokens = [n for kind, n in outcomes if kind == "done"]
    assert not errors, f"{len(errors)} churn request(s) failed:\n" + "\n".join(errors[:10])
    assert len(closed) >= 0.10 * count, (f"only {len(closed)} of {count} requests were closed "
                                         "mid-stream (a stream ended before the client closed it)")
    assert live_client.healthy(), "the server's health check fails after the churn"

    failures = []
    for p in prompts:
        again = live_client.complete(p.text, p.max_tokens)
        verdict = compare_generations(first[p.id].steps, again.steps, tie_eps,
                                      rescore=lambda k, p=p: rescore_stored(live_client, p.text,
                                                                            first[p.id].steps, k))
        gate_data.append(verdict.figures("churn re-check", p.id, len(first[p.id].steps)))
        if not verdict.passed:
            failures.append(f"{p.id}: {verdict.report()}")
    gate_notes.append(f"live churn: {count} requests at {in_flight} in flight in {wall:.0f}s, "
                      f"{len(closed)} closed mid-stream, completed prompts {min(tokens, default=0)}-"
                      f"{max(tokens, default=0)} tokens; then {len(prompts) - len(failures)}/{len(prompts)} "
                      f"canonical prompts equal to the first pass under the tie rule")
    assert not failures, "\n".join(failures)
