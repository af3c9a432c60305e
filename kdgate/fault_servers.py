"""Small fault-injecting HTTP servers for the live layer's own tests (loopback only):
each misbehaves in one way a real deployment can. They are never used to imitate a
working server: the success path is always a real inference server."""

from __future__ import annotations

import socket
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BEHAVIOURS = ("http-500", "malformed-json", "hang", "truncated-choice", "dies")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _handler(behaviour: str, seen_headers: list, die):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet
            pass

        def _answer(self):
            seen_headers.append(dict(self.headers))
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            if behaviour == "hang":
                time.sleep(3600)
                return
            if behaviour == "dies":
                # lists a model, then dies at the first generation: the request's connection
                # is dropped unanswered and the port stops listening
                if self.command == "GET" and self.path == "/v1/models":
                    body, code = b'{"data": [{"id": "model.gguf"}]}', 200
                elif self.command == "GET":
                    body, code = b'{"error": "not found"}', 404
                else:
                    self.close_connection = True
                    try:
                        self.connection.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    die()
                    return
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            if behaviour == "http-500":
                body, code = b'{"error": "internal"}', 500
            elif behaviour == "malformed-json":
                body, code = b'{"choices": [', 200
            else:  # truncated-choice: valid JSON, not a completion
                body, code = b'{"choices": []}', 200
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

    return Handler


@contextmanager
def fault_server(behaviour: str):
    """Yield (base_url, seen_headers) of a loopback server that misbehaves as asked."""
    if behaviour not in BEHAVIOURS:
        raise ValueError(f"behaviour must be one of {BEHAVIOURS}, got {behaviour!r}")
    seen: list = []
    holder: list = []

    def die():
        server = holder[0]
        server.socket.close()                  # new connections are refused from now on
        threading.Thread(target=server.shutdown, daemon=True).start()

    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(behaviour, seen, die))
    holder.append(server)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
