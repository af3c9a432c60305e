"""kdgate.live_burst: a burst returns every generation by prompt id, and when requests
fail it raises the failure that happened first in time, whatever the prompt order, and a
refused connection only when every failure is one (the live layer's fault test against a
server that drops one request and dies relies on both: the refusals that follow its death can
reach their clients before the drop reaches its own)."""

import threading

import pytest

from kdgate.live_burst import send_burst
from kdgate.live_client import ConnectionRefused, ServerError
from kdgate.live_prompts import LivePrompt


class ScriptedClient:
    """Stands in for LiveClient.complete only: per prompt text, a result or an error, and
    an event to wait for first (so the order in time is fixed)."""

    def __init__(self, script):
        self.script = script

    def complete(self, text, max_tokens, top_logprobs):
        outcome, wait_for, done = self.script[text]
        if wait_for is not None:
            assert wait_for.wait(10), "the scripted order did not happen"
        try:
            if isinstance(outcome, Exception):
                raise outcome
            return outcome
        finally:
            done.set()


def prompts(*texts):
    return [LivePrompt(id=f"p{k}", text=t, max_tokens=4) for k, t in enumerate(texts)]


def test_every_generation_comes_back_by_prompt_id():
    script = {t: (f"answer {t}", None, threading.Event()) for t in ("a", "b", "c")}
    assert send_burst(ScriptedClient(script), prompts("a", "b", "c")) == {
        "p0": "answer a", "p1": "answer b", "p2": "answer c"}


def test_the_earliest_failure_is_raised_not_the_first_prompts():
    dropped_done, refused_done = threading.Event(), threading.Event()
    script = {
        "first prompt": (ServerError("POST /v1/completions: connection refused"), dropped_done, refused_done),
        "second prompt": (ServerError("POST /v1/completions: connection dropped by the server"), None, dropped_done),
    }
    with pytest.raises(ServerError, match="connection dropped by the server"):
        send_burst(ScriptedClient(script), prompts("first prompt", "second prompt"))


def test_a_drop_outranks_refusals_that_came_first():
    refused_done, dropped_done = threading.Event(), threading.Event()
    script = {
        "refused": (ConnectionRefused("POST /v1/completions: connection refused"), None, refused_done),
        "dropped": (ServerError("POST /v1/completions: connection dropped by the server"), refused_done,
                    dropped_done),
    }
    with pytest.raises(ServerError, match="connection dropped by the server"):
        send_burst(ScriptedClient(script), prompts("refused", "dropped"))


def test_only_refusals_raise_the_earliest_refusal():
    first_done, second_done = threading.Event(), threading.Event()
    script = {
        "later": (ConnectionRefused("POST /v1/completions: connection refused (later)"), first_done, second_done),
        "first": (ConnectionRefused("POST /v1/completions: connection refused (first)"), None, first_done),
    }
    with pytest.raises(ConnectionRefused, match=r"\(first\)"):
        send_burst(ScriptedClient(script), prompts("later", "first"))
