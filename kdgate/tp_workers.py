"""Start tensor-parallel scheduler stand-ins the way SGLang starts its TP schedulers.

    python -m kdgate.tp_workers --tp-size 8 [--page-size 16] [--fault RANK=FAULT ...]

The launcher (this process) calls SGLang's ``load_plugins()`` first, as
``python -m sglang.launch_server`` does, then starts ``tp_size`` workers with the spawn
context. Each worker does what ``run_scheduler_process`` does up to its allocator:
``load_plugins()`` first, joins a torch.distributed gloo group, writes its ranks into
SGLang's runtime context (``get_parallel()``), builds SGLang's real KV allocator the way
a normal server does, then waits at a barrier. All processes write to the launcher's
stderr, as a server's workers write to its log or journal. If a worker exits with an
error, the launcher stops the others and exits non-zero (a failed startup).

Faults (``--fault RANK=NAME``) break one rank the way deployments break:
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import socket
import sys
import time
from datetime import timedelta

FAULTS = {
    "plugin-raises": "KDTREE_DEFRAG_SORT holds an invalid value on this rank, so the "
                     "plugin's entry point raises",
    "no-defrag-env": "KDTREE_DEFRAG_SORT is unset on this rank",
    "plugin-excluded": "SGLANG_PLUGINS names only another plugin on this rank",
    "hooks-twice": "the plugin registers its hooks twice on this rank (a second copy of "
                   "the entry point)",
    "silent": "this rank's log lines are lost (its stderr goes to /dev/null)",
}
__doc__ += "\n".join(f"    {k:16} {v}" for k, v in FAULTS.items()) + "\n"


def _apply_fault(fault: str | None) -> None:
    if fault is None:
        return
    if fault == "silent":
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
    elif fault == "plugin-raises":
        os.environ["KDTREE_DEFRAG_SORT"] = "yes"
    elif fault == "no-defrag-env":
        os.environ.pop("KDTREE_DEFRAG_SORT", None)
    elif fault == "plugin-excluded":
        os.environ["SGLANG_PLUGINS"] = "some-other-plugin"
    elif fault == "hooks-twice":
        from kdtree.plugin import register

        register()  # load_plugins() will register the same hooks again
    else:
        raise ValueError(f"unknown fault {fault!r}; known: {sorted(FAULTS)}")


def run_worker(rank: int, tp_size: int, port: int, page_size: int, pool_tokens: int,
               fault: str | None) -> None:
    """Body of one TP worker (a spawned process)."""
    _apply_fault(fault)
    from sglang.srt.plugins import load_plugins

    load_plugins()  # first, as in run_scheduler_process
    import torch
    import torch.distributed as dist
    from sglang.srt.runtime_context import get_parallel

    from kdgate.allocator_driver import make_allocator

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=tp_size, timeout=timedelta(seconds=120))
    get_parallel().override_permanently(tp_rank=rank, tp_size=tp_size)
    make_allocator(page_size, pool_tokens)
    dist.barrier()
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(tp_size: int, page_size: int, faults: dict[int, str], pool_tokens: int = 4096,
           timeout_s: float = 180.0) -> int:
    """Launcher body: returns 0 when every worker exited cleanly."""
    from sglang.srt.plugins import load_plugins

    load_plugins()  # the launcher loads plugins too; the plugin exports the start id here
    ctx = multiprocessing.get_context("spawn")
    port = _free_port()
    workers = [ctx.Process(target=run_worker, name=f"scheduler_TP{rank}",
                           args=(rank, tp_size, port, page_size, pool_tokens, faults.get(rank)))
               for rank in range(tp_size)]
    for w in workers:
        w.start()
    deadline = time.monotonic() + timeout_s
    failed = None
    while time.monotonic() < deadline:
        codes = [w.exitcode for w in workers]
        failed = next(((r, c) for r, c in enumerate(codes) if c not in (None, 0)), None)
        if failed or all(c == 0 for c in codes):
            break
        time.sleep(0.05)
    for w in workers:
        if w.is_alive():
            w.kill()
        w.join()
    if failed:
        print(f"tp_workers: rank {failed[0]} exited with code {failed[1]}: startup aborted",
              file=sys.stderr, flush=True)
        return 1
    if any(w.exitcode != 0 for w in workers):
        print(f"tp_workers: workers did not finish within {timeout_s:g}s", file=sys.stderr, flush=True)
        return 1
    return 0


def _parse_fault(text: str) -> tuple[int, str]:
    rank, sep, name = text.partition("=")
    if not sep or not rank.isdigit() or name not in FAULTS:
        raise argparse.ArgumentTypeError(
            f"--fault must be RANK=NAME with NAME one of {sorted(FAULTS)}, got {text!r}")
    return int(rank), name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kdgate.tp_workers", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tp-size", type=int, default=8)
    parser.add_argument("--page-size", type=int, default=16)
    parser.add_argument("--pool-tokens", type=int, default=4096)
    parser.add_argument("--fault", type=_parse_fault, action="append", default=[])
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds (default 180)")
    args = parser.parse_args(argv)
    if args.tp_size < 1:
        parser.error(f"--tp-size must be >= 1, got {args.tp_size}")
    faults = dict(args.fault)
    bad = [r for r in faults if r >= args.tp_size]
    if bad:
        parser.error(f"--fault rank(s) {bad} outside 0..{args.tp_size - 1}")
    return launch(args.tp_size, args.page_size, faults, args.pool_tokens, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
