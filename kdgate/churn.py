"""A seeded, serving-like churn workload on a real SGLang allocator.

The loop is a small continuous-batching scheduler: requests with prompt lengths spread
log-uniformly over ``prompt_tokens`` arrive and are admitted while the pool has room
(keeping a reserve for the decode growth of running requests); every step, each running
request decodes one token; requests finish at their sampled output length, a share are
aborted at a random point instead, and when a decode step finds the pool short the
newest request is retracted. Frees therefore come in an order nobody chose.

After ``operations`` allocator calls of churn, the next ``measure_requests`` admitted
prompts are the measured allocations: their slot contiguity is what the defrag patch is
meant to improve.
"""

from __future__ import annotations

import math
import os
import random
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field, fields
import multiprocessing

from kdgate.allocator_driver import AllocatorDriver, make_allocator
from kdgate.contiguity import Contiguity, measure_contiguity


@dataclass(frozen=True)
class ChurnConfig:
    page_size: int = 1
    pool_tokens: int = 262_144
    operations: int = 10_000            # allocator calls (alloc/extend/decode/free) of churn
    measure_requests: int = 200         # prompts admitted after churn that are measured
    seed: int = 0
    prompt_tokens: tuple[int, int] = (100, 32_768)   # log-uniform
    output_tokens: tuple[int, int] = (16, 1_024)     # log-uniform
    abort_share: float = 0.12           # requests aborted before their last token
    max_running: int = 96
    admit_per_step: int = 2
    decode_reserve: float = 0.3         # share of running requests' remaining output kept free
    check_every: int = 0                # run driver.check_invariants() every N calls (0: at end)

    def __post_init__(self):
        if self.operations < 1 or self.measure_requests < 1:
            raise ValueError("operations and measure_requests must be >= 1")
        if not 0 <= self.abort_share < 1:
            raise ValueError(f"abort_share must be in [0, 1), got {self.abort_share}")
        lo, hi = self.prompt_tokens
        if not 1 <= lo <= hi:
            raise ValueError(f"prompt_tokens must be (lo, hi) with 1 <= lo <= hi, got {self.prompt_tokens}")


@dataclass
class ChurnResult:
    config: ChurnConfig
    allocator: str
    need_sort: bool             # as the allocator had it after construction (hooks included)
    calls: int
    admitted: int
    finished: int
    aborted: int
    retracted: int
    mean_occupancy: float       # live share of the pool, averaged over steps
    contiguity: Contiguity
    seconds: float
    plugin_env: dict = field(default_factory=dict)
    driver: AllocatorDriver | None = field(default=None, repr=False)  # kept live: drain=False

    def as_dict(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "driver"}
        out["config"] = asdict(self.config)
        out["contiguity"] = self.contiguity.as_dict()
        return out


def _log_uniform(rng: random.Random, lo: int, hi: int) -> int:
    return int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))


@dataclass
class _Live:
    rid: int
    remaining: int      # decode tokens left before it finishes (or is aborted)
    aborts: bool


def run_churn(allocator, config: ChurnConfig, drain: bool = True) -> ChurnResult:
    """Drive ``allocator`` through the workload of ``config`` and measure contiguity.
    With ``drain=False`` the requests still running stay live and the result carries the
    driver, so more allocations can be made in the churned state."""
    rng = random.Random(config.seed)
    driver = AllocatorDriver(allocator)
    running: list[_Live] = []
    next_rid = 0
    counts = dict(admitted=0, finished=0, aborted=0, retracted=0)
    measured = []
    occupancy_sum, steps = 0.0, 0
    pending = None  # the next arrival: (prompt tokens, decode tokens until it ends, aborts)
    started = time.perf_counter()

    def maybe_check():
        if config.check_every and driver.calls % config.check_every == 0:
            driver.check_invariants()

    while len(measured) < config.measure_requests:
        churning = driver.calls < config.operations
        # -- admissions
        for _ in range(config.admit_per_step):
            if len(running) >= config.max_running:
                break
            if pending is None:
                prompt = _log_uniform(rng, *config.prompt_tokens)
                output = _log_uniform(rng, *config.output_tokens)
                aborts = rng.random() < config.abort_share
                pending = (prompt, rng.randint(0, output - 1) if aborts else output, aborts)
            prompt, output, aborts = pending
            reserve = config.decode_reserve * sum(r.remaining for r in running)
            if allocator.available_size() < prompt + reserve + config.page_size:
                break
            slots = driver.prefill(next_rid, prompt)
            maybe_check()
            if slots is None:
                break
            if not churning and len(measured) < config.measure_requests:
                measured.append(slots.clone())
            running.append(_Live(next_rid, output, aborts))
            next_rid += 1
            counts["admitted"] += 1
            pending = None
        # -- requests that end now (finish or abort), freed in random order
        ending = [r for r in running if r.remaining <= 0]
        rng.shuffle(ending)
        for r in ending:
            running.remove(r)
            driver.release(r.rid)
            counts["aborted" if r.aborts else "finished"] += 1
            maybe_check()
        # -- one decode step for everyone still running; retract the newest when short
        while running:
            slots = driver.decode([r.rid for r in running])
            maybe_check()
            if slots is not None:
                break
            victim = running.pop()
            driver.release(victim.rid)
            counts["retracted"] += 1
        for r in running:
            r.remaining -= 1
        occupancy_sum += driver.live_tokens() / driver.capacity
        steps += 1
    # drain: everything is freed at the end, and the pool must be whole again
    if drain:
        for r in running:
            driver.release(r.rid)
    driver.check_invariants()
    return ChurnResult(
        config=config, allocator=type(allocator).__name__, need_sort=bool(allocator.need_sort),
        calls=driver.calls, mean_occupancy=occupancy_sum / max(steps, 1),
        contiguity=measure_contiguity(measured), seconds=time.perf_counter() - started,
        driver=None if drain else driver, **counts,
    )


def run_churn_arm(config: ChurnConfig, plugin_env: dict[str, str]) -> ChurnResult:
    """One arm in a fresh process: apply ``plugin_env``, load plugins through SGLang's own
    ``load_plugins()`` (as every SGLang process does first), build the allocator the way a
    server does, run the churn. Meant for :func:`run_arms` (spawned processes)."""
    os.environ.update(plugin_env)
    import torch
    from sglang.srt.plugins import load_plugins

    torch.set_num_threads(1)  # arms run side by side; more threads only contend

    load_plugins()
    result = run_churn(make_allocator(config.page_size, config.pool_tokens), config)
    result.plugin_env = dict(plugin_env)
    return result


def run_arms(arms: list[tuple[ChurnConfig, dict[str, str]]], workers: int = 2) -> list[ChurnResult]:
    """Run each (config, plugin_env) arm in its own spawned process, ``workers`` at a time.
    A spawned process starts clean: hooks loaded in one arm cannot leak into another."""
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx, max_tasks_per_child=1) as pool:
        futures = [pool.submit(run_churn_arm, cfg, env) for cfg, env in arms]
        return [f.result() for f in futures]
