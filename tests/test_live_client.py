"""The live client against servers that misbehave: each fails clearly, within its bound,
and the API key never appears in what the client says."""

import time

import pytest

from kdgate.fault_servers import fault_server, free_port
from kdgate.live_client import LiveClient, ServerError

KEY = "sk-secret-key-123"


def test_refused_connection_is_named():
    client = LiveClient(f"http://127.0.0.1:{free_port()}", api_key=KEY, timeout_s=5)
    with pytest.raises(ServerError, match="connection refused") as info:
        client.complete("hi", max_tokens=1)
    assert KEY not in str(info.value) and KEY not in repr(client)


@pytest.mark.parametrize("behaviour, message", [
    ("http-500", "HTTP 500"),
    ("malformed-json", "not JSON"),
    ("truncated-choice", "malformed answer"),
])
def test_bad_answers_are_named(behaviour, message):
    with fault_server(behaviour) as (url, seen):
        client = LiveClient(url, api_key=KEY, timeout_s=5)
        with pytest.raises(ServerError, match=message) as info:
            client.complete("hi", max_tokens=1)
    assert KEY not in str(info.value)
    assert any(h.get("Authorization") == f"Bearer {KEY}" for h in seen)


def test_a_server_that_never_answers_times_out_within_the_bound():
    with fault_server("hang") as (url, _):
        client = LiveClient(url, timeout_s=2)
        started = time.monotonic()
        with pytest.raises(ServerError, match="no answer within 2s"):
            client.complete("hi", max_tokens=1)
        assert time.monotonic() - started < 10


def test_endpoint_must_be_http():
    with pytest.raises(ValueError, match="endpoint must start with http"):
        LiveClient("localhost:8000")
