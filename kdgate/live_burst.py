"""Sending many requests at once (the live layer's bursts)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from kdgate.live_client import ConnectionRefused, Generation, LiveClient
from kdgate.live_prompts import LivePrompt


def send_burst(client: LiveClient, prompts: list[LivePrompt], in_flight: int | None = None,
               top_logprobs: int = 5) -> dict[str, Generation]:
    """Greedy completions of ``prompts``, ``in_flight`` at a time (default: all at once),
    by prompt id. Once every request has finished, the failure that happened first (in
    time, not in prompt order) is raised, refused connections last: the later failures
    usually follow from the first, and a server that drops one request and dies refuses the
    rest, some of them before the dropped request's client has seen the drop."""
    def attempt(prompt: LivePrompt):
        try:
            return client.complete(prompt.text, prompt.max_tokens, top_logprobs), None
        except Exception as exc:  # re-raised below, the earliest first
            return None, (time.monotonic(), exc)

    with ThreadPoolExecutor(max_workers=in_flight or len(prompts)) as pool:
        outcomes = {p.id: pool.submit(attempt, p) for p in prompts}
        results = {pid: f.result() for pid, f in outcomes.items()}
    failures = sorted((failure for _, failure in results.values() if failure is not None),
                      key=lambda f: (isinstance(f[1], ConnectionRefused), f[0]))
    if failures:
        raise failures[0][1]
    return {pid: generation for pid, (generation, _) in results.items()}
