"""A fault-injecting proxy in front of a real inference server (loopback only), for the live
layer's own tests. Every answer comes from the real server; the proxy breaks one thing:

* ``change_token_at=k``: in the k-th greedy completion answer (1-based, counted in the order
  the greedy answers leave the proxy; streamed and sampled answers are not counted), the first token that is a clear winner (top-1 ahead of top-2
  by more than ``CLEAR_WIN`` nats) becomes its runner-up, with the two logprobs swapped and
  the text rebuilt, as a verify kernel that corrupts one request of a batch would make it;
* ``change_request=(key, n)``: the same change in the n-th answer to the request body whose
  digest is ``key`` (:attr:`Answer.key` of an earlier run): the same request whatever order
  concurrent answers leave in;
* ``hang_after=n``: after n answered POST requests, every request is held unanswered.

With a ``cache`` (a dict), answers are kept by request body and served again from it, so a
sweep over k repeats one real run's answers quickly; a request not seen before goes to the
server. Each completion answer is logged (:class:`Answer`) with the test that sent it (the
live client's ``X-Kdgate-Test`` header) and what was done to it.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import requests

CLEAR_WIN = 1.0       # nats between top-1 and top-2 for a token the proxy may change
COMPLETIONS = "/v1/completions"


@dataclass
class Answer:
    """One completion answer: its index among all completion answers, the test that sent it,
    its kind ('greedy', 'sampled', 'stream', 'no-logprobs'), its index among greedy answers
    (what ``change_token_at`` counts) and, when changed, the step."""
    index: int
    test: str
    kind: str
    greedy_index: int | None = None
    key: str = ""                    # digest of the request body
    prompt: str = ""                 # its prompt's first 80 characters
    occurrence: int = 0              # this answer is the n-th to that body
    changed_step: int | None = None
    note: str = ""
    changeable: bool | None = None   # greedy answers: holds a clear-winner token


def answer_kind(body: dict) -> str:
    if body.get("stream"):
        return "stream"
    if float(body.get("temperature", 1.0)) != 0.0:
        return "sampled"
    if not body.get("logprobs"):
        return "no-logprobs"
    return "greedy"


def change_one_token(answer: dict) -> tuple[int | None, str]:
    """Turn the first clear-winner token of an OpenAI completions answer with llama-server's
    per-token ``logprobs.content`` into its runner-up, in place. Returns (step, note)."""
    choice = answer["choices"][0]
    content = (choice.get("logprobs") or {}).get("content") or []
    text_was_tokens = choice.get("text") == "".join(item.get("token", "") for item in content)
    for i, item in enumerate(content):
        top = sorted(item.get("top_logprobs") or [], key=lambda a: -a["logprob"])
        if len(top) < 2 or top[0].get("id") != item.get("id") or top[0]["logprob"] - top[1]["logprob"] <= CLEAR_WIN:
            continue
        first, second = dict(top[0]), dict(top[1])
        first["logprob"], second["logprob"] = top[1]["logprob"], top[0]["logprob"]
        item.update({k: second[k] for k in ("id", "token", "bytes") if k in second})
        item["logprob"] = second["logprob"]
        item["top_logprobs"] = [second, first, *top[2:]]
        if text_was_tokens:
            choice["text"] = "".join(it.get("token", "") for it in content)
        return i, f"{first.get('token')!r} -> {second.get('token')!r}"
    return None, "no clear-winner token to change"


class _Server(ThreadingHTTPServer):
    request_queue_size = 256    # the live layer opens 32+ connections at once (default backlog 5)


class FaultProxy:
    """``with FaultProxy(upstream, ...) as url:`` serves the proxy on a free loopback port."""

    def __init__(self, upstream: str, *, change_token_at: int | None = None,
                 change_request: tuple[str, int] | None = None, hang_after: int | None = None,
                 cache: dict | None = None, timeout_s: float = 900.0):
        if change_token_at is not None and change_token_at < 1:
            raise ValueError(f"change_token_at must be >= 1 (1-based answer index), got {change_token_at}")
        if hang_after is not None and hang_after < 0:
            raise ValueError(f"hang_after must be >= 0, got {hang_after}")
        self.upstream = upstream.rstrip("/")
        self.change_token_at, self.hang_after = change_token_at, hang_after
        self.change_request = change_request
        self._occurrences: dict[str, int] = {}
        self.cache = cache
        self.timeout_s = timeout_s
        self.answers: list[Answer] = []
        self.errors: list[str] = []              # the proxy's own failures (answered 502)
        self.posts_answered = 0
        self._greedy = 0
        self.hung_since: float | None = None     # time.monotonic() of the first held request
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._server: ThreadingHTTPServer | None = None

    # -- what the handler calls ---------------------------------------------------------
    def _hold(self) -> bool:
        with self._lock:
            if self.hang_after is None or self.posts_answered < self.hang_after:
                return False
            if self.hung_since is None:
                self.hung_since = time.monotonic()
        self._stop.wait()
        return True

    def _fetch(self, method: str, path: str, raw: bytes, headers: dict) -> tuple[int, str, bytes]:
        key = (method, path, raw)
        if self.cache is not None and key in self.cache:
            return self.cache[key]
        forward = {k: v for k, v in headers.items() if k.lower() in ("content-type", "authorization")}
        for attempt in (1, 2):   # one retry of a dropped upstream connection: the proxy is not under test
            try:
                r = requests.request(method, self.upstream + path, data=raw or None, headers=forward,
                                     timeout=self.timeout_s)
                break
            except requests.ConnectionError:
                if attempt == 2:
                    raise
        got = (r.status_code, r.headers.get("Content-Type", "application/json"), r.content)
        if self.cache is not None and r.status_code < 500:
            self.cache[key] = got
        return got

    def _log_answer(self, test: str, kind: str, raw: bytes = b"", prompt: str = "") -> Answer:
        with self._lock:
            entry = Answer(len(self.answers) + 1, test, kind, prompt=str(prompt)[:80])
            entry.key = hashlib.sha256(raw).hexdigest()[:16]
            entry.occurrence = self._occurrences[entry.key] = self._occurrences.get(entry.key, 0) + 1
            if kind == "greedy":
                self._greedy += 1
                entry.greedy_index = self._greedy
            self.answers.append(entry)
            return entry

    def _handler(self):
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _reply(self, code: int, ctype: str, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _stream(self, raw: bytes, headers: dict, entry: Answer) -> None:
                key = ("STREAM", self.path, raw)
                cached = proxy.cache.get(key) if proxy.cache is not None else None
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                sent = []
                try:
                    if cached is not None:
                        for line in cached:
                            self.wfile.write(line)
                            self.wfile.flush()
                        return
                    forward = {k: v for k, v in headers.items() if k.lower() in ("content-type", "authorization")}
                    with requests.post(proxy.upstream + self.path, data=raw, headers=forward, stream=True,
                                       timeout=proxy.timeout_s) as r:
                        for line in r.iter_lines():
                            chunk = line + b"\n"
                            self.wfile.write(chunk)
                            self.wfile.flush()
                            sent.append(chunk)
                except OSError:
                    entry.note = "closed by the client mid-stream"
                finally:
                    if proxy.cache is not None and cached is None:
                        proxy.cache[key] = sent

            def _answer(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if proxy._hold():
                    return
                test = self.headers.get("X-Kdgate-Test", "")
                headers = dict(self.headers)
                body = {}
                if self.command == "POST" and self.path == COMPLETIONS:
                    try:
                        body = json.loads(raw or b"{}")
                    except ValueError:
                        body = {}
                if self.command == "POST" and self.path == COMPLETIONS and body.get("stream"):
                    entry = proxy._log_answer(test, "stream")
                    self._stream(raw, headers, entry)
                    with proxy._lock:
                        proxy.posts_answered += 1
                    return
                code, ctype, out = proxy._fetch(self.command, self.path, raw, headers)
                if self.command == "POST" and self.path == COMPLETIONS and code == 200:
                    entry = proxy._log_answer(test, answer_kind(body), raw, body.get("prompt", ""))
                    if entry.kind == "greedy":
                        answer = json.loads(out)
                        step, note = change_one_token(answer)
                        entry.changeable = step is not None
                        if proxy._targets(entry):
                            entry.changed_step, entry.note = step, note
                            out = json.dumps(answer).encode()
                if self.command == "POST":
                    with proxy._lock:
                        proxy.posts_answered += 1
                self._reply(code, ctype, out)

            def _safe(self):
                try:
                    self._answer()
                except Exception as exc:  # the proxy's own failure: say so, never drop silently
                    text = f"{self.command} {self.path}: {type(exc).__name__}: {exc}"
                    proxy.errors.append(text)
                    try:
                        self._reply(502, "text/plain", f"fault proxy: {text}".encode())
                    except OSError:
                        pass

            do_GET = do_POST = _safe

        return Handler

    # -- lifetime -----------------------------------------------------------------------
    def __enter__(self) -> str:
        self._server = _Server(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def changed(self) -> Answer | None:
        """The answer the token change was applied to (None if it has not been reached)."""
        return next((a for a in self.answers if self._targets(a)), None)

    def _targets(self, entry: Answer) -> bool:
        if self.change_request is not None:
            return (entry.key, entry.occurrence) == tuple(self.change_request)
        return entry.greedy_index is not None and entry.greedy_index == self.change_token_at
