"""One client for the servers the live layer judges: SGLang (native ``/generate``,
``/server_info``, ``/health_generate``) and any OpenAI-compatible completions server
(``/v1/completions`` with ``logprobs``), such as the embedded llama.cpp server.

Every request has a timeout; nothing is retried once the server is up (a retry would
hide the failure the gate exists to see). With ``fail_fast`` on (the live layer turns it on
once the server is ready), the first request that times out or loses its connection marks
the server stopped, and every later request raises :class:`ServerStopped` at once, naming
where the server stopped answering, instead of waiting out its own timeout. The API key is
sent as a bearer token and is never printed: it is not part of any repr, message or log line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import requests


def _file_name(path: str) -> str:
    """Servers that name the model by its file path: keep the file name (stable across hosts)."""
    return str(path or "").replace("\\", "/").rsplit("/", 1)[-1]


def _connection_problem(exc: Exception) -> str:
    """'connection refused' or 'connection dropped by the server' (never the request)."""
    text = repr(exc)
    if "Connection refused" in text or "NewConnectionError" in text:
        return "connection refused"
    if "RemoteDisconnected" in text or "Connection aborted" in text or "ConnectionReset" in text:
        return "connection dropped by the server before it answered"
    return f"connection failed ({type(exc).__name__})"


class ServerError(RuntimeError):
    """The server refused, failed, answered garbage or did not answer in time."""


class ConnectionRefused(ServerError):
    """Nothing accepted the connection: no server listens there, or it has died."""


class ServerStopped(ServerError):
    """Not sent: an earlier request of this session timed out or lost its connection."""


class StopState:
    """Where the server first stopped answering (None while it answers); shared by the
    clients of one session (a perturbed copy of the client shares its original's)."""

    def __init__(self):
        self.where: str | None = None


@dataclass(frozen=True)
class TokenStep:
    """One generated token: its id (None where the API gives only text), text, logprob,
    and the top alternatives as (id or None, text, logprob), best first."""
    id: int | None
    text: str
    logprob: float
    top: tuple[tuple[int | None, str, float], ...]

    def key(self):
        return self.id if self.id is not None else self.text


@dataclass
class Generation:
    prompt_tokens: int
    steps: list[TokenStep]
    text: str
    finish_reason: str | None
    meta: dict = field(default_factory=dict)   # e.g. SGLang's spec_accept_length


def _openai_steps(choice: dict) -> list[TokenStep]:
    """Token steps of one /v1/completions choice: the legacy OpenAI logprobs layout
    (tokens / token_logprobs / top_logprobs dicts; SGLang, llama-cpp-python) or the
    per-token ``content`` list with ids (llama-server)."""
    lp = choice.get("logprobs") or {}
    if isinstance(lp.get("content"), list):
        return [TokenStep(item.get("id"), item.get("token", ""), float(item["logprob"]),
                          tuple(sorted(((a.get("id"), a.get("token", ""), float(a["logprob"]))
                                        for a in item.get("top_logprobs") or []), key=lambda a: -a[2])))
                for item in lp["content"]]
    tokens, token_lps = lp.get("tokens") or [], lp.get("token_logprobs") or []
    tops = lp.get("top_logprobs") or [None] * len(tokens)
    ids = choice.get("token_ids") or [None] * len(tokens)
    steps = []
    for tid, text, logprob, top in zip(ids, tokens, token_lps, tops):
        alts = sorted(((None, t, float(v)) for t, v in (top or {}).items()), key=lambda a: -a[2])
        steps.append(TokenStep(tid, text, float(logprob), tuple(alts)))
    return steps


class LiveClient:
    def __init__(self, base_url: str, api_key: str | None = None, timeout_s: float = 300.0,
                 extra_body: dict | None = None):
        """``extra_body``: fields added to every /v1/completions request (for a server whose
        "temperature 0" is not plain greedy, e.g. llama.cpp's repeat penalty)."""
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"endpoint must start with http:// or https://, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key
        self.timeout_s = timeout_s
        self._session = requests.Session()
        self._flavor: str | None = None
        self.extra_body = dict(extra_body or {})
        self.fail_fast = False      # on: after one timeout or dropped connection, send nothing more
        self.where = ""             # what is sending now (the live layer: the test's node id)
        self._stop = StopState()

    def with_body(self, extra_body: dict) -> "LiveClient":
        """A client of the same server adding ``extra_body`` to every completions request,
        sharing this one's fail-fast state."""
        other = LiveClient(self.base_url, self._api_key, self.timeout_s, {**self.extra_body, **extra_body})
        other.fail_fast, other.where, other._stop = self.fail_fast, self.where, self._stop
        return other

    @property
    def stopped(self) -> str | None:
        """Where the server stopped answering ('<test>, <request>'), or None."""
        return self._stop.where

    def _mark_stopped(self, request: str, problem: str) -> None:
        if self.fail_fast and self._stop.where is None:
            self._stop.where = f"{self.where or 'the live layer'}, {request} ({problem})"

    def __repr__(self) -> str:
        return f"LiveClient({self.base_url!r}, api_key={'<set>' if self._api_key else None})"

    # -- transport ----------------------------------------------------------------------
    def _headers(self) -> dict:
        """The bearer token, and ``X-Kdgate-Test`` naming what sends the request (the test's
        node id), for the server's logs and the gate's own fault proxy."""
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        if self.where:
            headers["X-Kdgate-Test"] = self.where.encode("ascii", "replace").decode()
        return headers

    def _send(self, method: str, path: str, body: dict | None = None,
              timeout_s: float | None = None, stream: bool = False) -> requests.Response:
        """One HTTP exchange; transport failures and HTTP >= 400 become ServerError."""
        if self.fail_fast and self._stop.where is not None:
            raise ServerStopped(f"the server stopped answering at {self._stop.where}; "
                                f"{method} {path} not sent")
        try:
            response = self._session.request(method, self.base_url + path, json=body,
                                             headers=self._headers(), stream=stream,
                                             timeout=timeout_s or self.timeout_s)
        except requests.Timeout:
            problem = f"no answer within {timeout_s or self.timeout_s:g}s"
            self._mark_stopped(f"{method} {path}", problem)
            raise ServerError(f"{method} {path}: {problem}") from None
        except requests.ConnectionError as exc:
            problem = _connection_problem(exc)
            self._mark_stopped(f"{method} {path}", problem)
            error = ConnectionRefused if problem == "connection refused" else ServerError
            raise error(f"{method} {path}: {problem} ({self.base_url})") from None
        except requests.RequestException as exc:
            raise ServerError(f"{method} {path}: {type(exc).__name__}") from None
        if response.status_code >= 400:
            text = "" if stream else f": {response.text[:300]}"
            response.close()
            raise ServerError(f"{method} {path}: HTTP {response.status_code}{text}")
        return response

    def _request(self, method: str, path: str, body: dict | None = None,
                 timeout_s: float | None = None) -> dict:
        response = self._send(method, path, body, timeout_s)
        try:
            return response.json()
        except (json.JSONDecodeError, ValueError):
            raise ServerError(f"{method} {path}: answer is not JSON: {response.text[:200]!r}") from None

    # -- server facts -------------------------------------------------------------------
    def flavor(self) -> str:
        """'sglang' (answers SGLang's /server_info), 'llama.cpp' (answers llama-server's
        /props) or 'openai' (any other OpenAI-compatible completions server)."""
        if self._flavor is None:
            reached = False
            for path, flavor, key in (("/server_info", "sglang", "tp_size"),
                                      ("/props", "llama.cpp", "total_slots")):
                try:
                    info = self._request("GET", path, timeout_s=min(self.timeout_s, 30))
                except ServerError as exc:
                    # an answer other than 503 (still loading) means the server is up
                    reached = reached or (("HTTP" in str(exc) and "HTTP 503" not in str(exc))
                                          or "not JSON" in str(exc))
                    continue
                reached = True
                if isinstance(info, dict) and key in info:
                    self._flavor = flavor
                    break
            if self._flavor is None:
                if not reached:
                    return "openai"     # not reachable yet (starting up): decide later
                self._flavor = "openai"
        return self._flavor

    def server_info(self) -> dict | None:
        """SGLang's /server_info or llama-server's /props; None for other servers."""
        path = {"sglang": "/server_info", "llama.cpp": "/props"}.get(self.flavor())
        return self._request("GET", path) if path else None

    def models(self) -> list[str]:
        data = self._request("GET", "/v1/models").get("data", [])
        return [m.get("id", "") for m in data if isinstance(m, dict)]

    def identity(self) -> dict:
        """What a snapshot is pinned to: model, tp_size, backend, speculative settings, and
        for llama-server its build (numerics change between builds)."""
        flavor = self.flavor()
        info = self.server_info()
        if flavor == "sglang":
            keys = ("model_path", "served_model_name", "tp_size", "attention_backend",
                    "speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
                    "speculative_num_draft_tokens", "kv_cache_dtype", "page_size")
            return {"server": "sglang", **{k: info.get(k) for k in keys}}
        if flavor == "llama.cpp":
            try:
                slots = self._request("GET", "/slots")
                speculative = bool(slots and slots[0].get("speculative"))
            except (ServerError, AttributeError, IndexError, KeyError, TypeError):
                speculative = None      # the server does not expose its slots
            return {"server": "llama.cpp", "build": info.get("build_info"),
                    "model": _file_name(info.get("model_path", "")), "tp_size": 1,
                    "slot_ctx": (info.get("default_generation_settings") or {}).get("n_ctx"),
                    "speculative": speculative}
        model = (self.models() or [""])[0]
        return {"server": "openai-compatible", "model": _file_name(model), "tp_size": 1}

    def context_limit(self) -> int | None:
        """Tokens one request may hold (prompt + output), as the server reports it."""
        info = self.server_info()
        if info is None:
            return None
        if self.flavor() == "llama.cpp":
            return (info.get("default_generation_settings") or {}).get("n_ctx")
        return info.get("context_length") or info.get("max_req_input_len")

    def count_tokens(self, text: str) -> int:
        """Prompt tokens of ``text`` by the server's own tokenizer."""
        if self.flavor() == "llama.cpp":
            answer = self._request("POST", "/tokenize", {"content": text, "add_special": True})
            try:
                return len(answer["tokens"])
            except (KeyError, TypeError):
                raise ServerError(f"POST /tokenize: malformed answer {str(answer)[:200]!r}") from None
        return self.complete(text, max_tokens=1, top_logprobs=0).prompt_tokens

    def healthy(self) -> bool:
        """The server's own health check (SGLang: /health_generate runs a generation)."""
        path = "/health_generate" if self.flavor() == "sglang" else "/health"
        try:
            self._send("GET", path, timeout_s=min(self.timeout_s, 60))
            return True
        except ServerError:
            return False

    # -- generation ---------------------------------------------------------------------
    def generate_once(self, max_tokens: int = 1, timeout_s: float | None = None) -> None:
        """A real one-token generation (readiness)."""
        self.complete("Hello", max_tokens=max_tokens, top_logprobs=0, timeout_s=timeout_s)

    def complete(self, prompt: str, max_tokens: int, top_logprobs: int = 5,
                 timeout_s: float | None = None) -> Generation:
        """Greedy (temperature 0) completion with per-token logprobs and top alternatives."""
        if self.flavor() == "sglang":
            return self._sglang_generate(prompt, max_tokens, top_logprobs, timeout_s)
        body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0,
                "logprobs": top_logprobs or None, "return_token_ids": True, **self.extra_body}
        answer = self._request("POST", "/v1/completions", body, timeout_s)
        try:
            choice = answer["choices"][0]
            steps = _openai_steps(choice)
            usage = answer.get("usage") or {}
            timings = answer.get("timings") or {}
            meta = {k: timings[k] for k in ("draft_n", "draft_n_accepted") if k in timings}
            return Generation(int(usage.get("prompt_tokens", 0)), steps, choice.get("text", ""),
                              choice.get("finish_reason"), meta)
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
            raise ServerError(f"POST /v1/completions: malformed answer ({type(exc).__name__}: {exc})") from None

    def stream_and_abort(self, prompt: str, max_tokens: int, after_chunks: int,
                         timeout_s: float | None = None) -> int:
        """Start a streamed greedy completion, read ``after_chunks`` events, then close the
        connection mid-stream (a client abort). Returns the events read before closing
        (fewer when the stream ended first)."""
        if self.flavor() == "sglang":
            path, body = "/generate", {"text": prompt, "stream": True,
                                        "sampling_params": {"temperature": 0.0, "max_new_tokens": max_tokens}}
        else:
            path, body = "/v1/completions", {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0,
                                             "stream": True, **self.extra_body}
        response = self._send("POST", path, body, timeout_s, stream=True)
        read = 0
        try:
            for line in response.iter_lines():
                if line.startswith(b"data:"):
                    read += 1
                    if read >= after_chunks:
                        break
        except requests.RequestException as exc:
            self._mark_stopped(f"POST {path} (stream)", f"{type(exc).__name__} after {read} events")
            raise ServerError(f"POST {path} (stream): {type(exc).__name__} after {read} events") from None
        finally:
            response.close()
        return read

    def _sglang_generate(self, prompt, max_tokens, top_logprobs, timeout_s) -> Generation:
        body = {"text": prompt, "sampling_params": {"temperature": 0.0, "max_new_tokens": max_tokens},
                "return_logprob": True, "top_logprobs_num": top_logprobs, "logprob_start_len": -1,
                "return_text_in_logprobs": True}
        answer = self._request("POST", "/generate", body, timeout_s)
        try:
            meta = answer["meta_info"]
            toks = meta["output_token_logprobs"]
            tops = meta.get("output_top_logprobs") or [[]] * len(toks)
            steps = [TokenStep(int(t[1]), t[2] or "", float(t[0]),
                               tuple((int(a[1]), a[2] or "", float(a[0])) for a in (top or [])))
                     for t, top in zip(toks, tops)]
            keep = {k: v for k, v in meta.items() if k.startswith("spec_")}
            finish = meta.get("finish_reason")
            return Generation(int(meta.get("prompt_tokens", 0)), steps, answer.get("text", ""),
                              finish.get("type") if isinstance(finish, dict) else finish, keep)
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise ServerError(f"POST /generate: malformed answer ({type(exc).__name__}: {exc})") from None
