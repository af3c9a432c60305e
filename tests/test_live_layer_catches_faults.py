"""The live layer against a real llama-server behind kdgate.fault_proxy: one token changed in
one answer must fail the test that received it, for an answer in every live test; a server
that stops answering mid-run must fail the layer within one request timeout plus 30 s.

The live runs use a small churn (CHURN) so that the record run stays short on a CPU; the
sweep over 30+ answer indices of a full run is ``python -m kdgate.token_fault_sweep``."""

import time

import pytest

from kdgate.embedded_server import EmbeddedServer, EmbeddedServerUnavailable
from kdgate.fault_proxy import FaultProxy, change_one_token
from kdgate.token_fault_sweep import live_run, record_and_replay, run_with_change, sender_test

CHURN = ["--churn-requests", "40", "--churn-concurrency", "16"]
HANG_TIMEOUT_S = 20
LIVE_TESTS = ["test_generations_match_the_snapshot", "test_every_request_is_unchanged_inside_a_burst",
              "test_speculative_acceptance_holds", "test_churn_then_the_canonical_prompts_again",
              "test_passkey_at_every_length_and_depth", "test_greedy_generation_is_repeatable"]


@pytest.fixture(scope="module")
def upstream():
    try:
        server = EmbeddedServer()
    except EmbeddedServerUnavailable as exc:
        pytest.skip(f"not run: {exc}")
    with server as client:
        yield client.base_url


@pytest.fixture(scope="module")
def recorded(upstream, tmp_path_factory):
    """A record run through the proxy, then a clean run from its cache, which must pass."""
    workdir = tmp_path_factory.mktemp("sweep")
    base = record_and_replay(upstream, workdir, CHURN)
    assert "error" not in base, base["error"]
    return workdir, base["cache"], base["answers"]


def burst_filler(answer) -> bool:
    """A concurrency filler's answer inside the burst (its second sending, after the solo run)."""
    from kdgate.live_prompts import burst_fillers

    heads = {p.text[:80] for p in burst_fillers(10, seed=1)}
    return answer.prompt in heads and answer.occurrence == 2


@pytest.mark.parametrize("target, where", [(t, "any") for t in LIVE_TESTS] + [
    ("test_every_request_is_unchanged_inside_a_burst", "a filler inside the burst")])
def test_one_changed_token_fails_the_test_that_received_it(upstream, recorded, target, where):
    workdir, cache, answers = recorded
    mine = [a for a in answers if a.kind == "greedy" and a.changeable and sender_test(a) == target
            and (where == "any" or burst_filler(a))]
    assert mine, f"{target} got no greedy answer with a clear-winner token ({where}) in the clean run"
    chosen = mine[len(mine) // 2]
    row = run_with_change(upstream, cache, workdir, chosen.greedy_index, chosen, CHURN)
    assert row["changed_step"] is not None, f"answer {row['k']} was not changed: {row['changed']}"
    assert row["test"] == target, f"answer {row['k']} went to {row['test']}, not {target}"
    assert row["caught"], (f"one changed token in answer {row['k']} ({row['changed']}) of {target} was not "
                           f"caught: rc {row['rc']}, failing {row['failed']}; see {workdir / ('k%d.log' % row['k'])}")


def test_every_live_test_sends_greedy_completions(recorded):
    """The clean run (which the fixture requires to pass) reached every live test, so the
    parametrized test above has an answer in each."""
    _, _, answers = recorded
    senders = {sender_test(a) for a in answers}
    assert set(LIVE_TESTS) <= senders, f"tests that sent no completion: {set(LIVE_TESTS) - senders}"


def test_a_server_that_hangs_mid_run_fails_the_layer_within_one_timeout(upstream, tmp_path):
    proxy = FaultProxy(upstream, hang_after=12)
    with proxy as url:
        run = live_run(url, tmp_path, "hang", [*CHURN, "--request-timeout", str(HANG_TIMEOUT_S)])
        ended = time.monotonic()
    output = (tmp_path / "hang.log").read_text()
    assert proxy.hung_since is not None, "the proxy never held a request: the run sent fewer than 13 POSTs"
    after_hang = ended - proxy.hung_since
    print(f"hang after {proxy.posts_answered} POSTs: layer ended {after_hang:.1f}s after the first held "
          f"request (request timeout {HANG_TIMEOUT_S}s), whole run {run['seconds']:.1f}s")
    assert run["rc"] == 1, output[-3000:]
    assert "the server stopped answering at" in output, output[-3000:]
    assert after_hang <= HANG_TIMEOUT_S + 30, (
        f"the layer took {after_hang:.0f}s after the server hung (bound {HANG_TIMEOUT_S + 30}s; "
        f"whole run {run['seconds']:.0f}s)")


def test_the_token_change_swaps_a_clear_winner_and_rebuilds_the_text():
    def item(tid, tok, lp, tops):
        return {"id": tid, "token": tok, "logprob": lp,
                "top_logprobs": [{"id": i, "token": t, "logprob": v} for i, t, v in tops]}
    answer = {"choices": [{"text": " a b", "logprobs": {"content": [
        item(1, " a", -0.1, [(1, " a", -0.1), (2, " x", -0.5)]),          # near-tie: left alone
        item(3, " b", -0.01, [(3, " b", -0.01), (4, " c", -3.0)]),        # clear winner: changed
    ]}}]}
    step, note = change_one_token(answer)
    content = answer["choices"][0]["logprobs"]["content"]
    assert step == 1 and note == "' b' -> ' c'"
    assert content[1]["id"] == 4 and content[1]["logprob"] == -0.01
    assert [t["id"] for t in content[1]["top_logprobs"]] == [4, 3]
    assert answer["choices"][0]["text"] == " a c"
    assert content[0]["id"] == 1


def test_a_change_index_below_one_is_refused():
    with pytest.raises(ValueError, match="change_token_at must be >= 1"):
        FaultProxy("http://127.0.0.1:1", change_token_at=0)


def test_the_spread_hits_every_test_and_only_changeable_answers():
    from kdgate.fault_proxy import Answer
    from kdgate.token_fault_sweep import spread

    answers = [Answer(i, f"m.py::{'big' if i <= 90 else 'small'}", "greedy", greedy_index=i,
                      changeable=i % 10 != 3) for i in range(1, 101)]
    answers += [Answer(101, "m.py::big", "stream"), Answer(102, "m.py::big", "sampled")]
    picks = spread(answers, 30)
    assert len(picks) >= 30
    assert all(answers[k - 1].changeable for k in picks), "picked an answer with no clear-winner token"
    assert any(k > 90 for k in picks) and not {101, 102} & set(picks)
