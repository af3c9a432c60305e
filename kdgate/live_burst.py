"""Sending many requests at once (the live layer's bursts)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from kdgate.live_client import Generation, LiveClient
from kdgate.live_prompts import LivePrompt


def send_burst(client: LiveClient, prompts: list[LivePrompt], in_flight: int | None = None,
               top_logprobs: int = 5) -> dict[str, Generation]:
    """Greedy completions of ``prompts``, ``in_flight`` at a time (default: all at once),
    by prompt id. The first failure is raised after every request has finished."""
    with ThreadPoolExecutor(max_workers=in_flight or len(prompts)) as pool:
        futures = {p.id: pool.submit(client.complete, p.text, p.max_tokens, top_logprobs) for p in prompts}
        return {pid: f.result() for pid, f in futures.items()}
