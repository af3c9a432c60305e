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


def test_after_one_timeout_a_fail_fast_client_sends_nothing_more_and_says_where():
    from kdgate.live_client import ServerStopped

    with fault_server("hang") as (url, seen):
        client = LiveClient(url, timeout_s=1)
        client.fail_fast, client.where = True, "suites/live/test_x.py::test_y"
        with pytest.raises(ServerError, match="no answer within 1s"):
            client._request("POST", "/v1/completions", {"prompt": "a"})
        started = time.monotonic()
        with pytest.raises(ServerStopped, match=r"stopped answering at suites/live/test_x.py::test_y, "
                                                r"POST /v1/completions \(no answer within 1s\)"):
            client.with_body({"temperature": 1.0})._request("POST", "/v1/completions", {"prompt": "b"})
        assert time.monotonic() - started < 0.5
        assert len(seen) == 1, "the second request reached the server"
        assert seen[0].get("X-Kdgate-Test") == "suites/live/test_x.py::test_y"


def test_without_fail_fast_each_request_waits_its_own_timeout():
    with fault_server("hang") as (url, seen):
        client = LiveClient(url, timeout_s=1)
        for _ in range(2):
            with pytest.raises(ServerError, match="no answer within 1s"):
                client._request("POST", "/v1/completions", {"prompt": "a"})
        assert client.stopped is None and len(seen) == 2
