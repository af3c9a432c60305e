"""Does the live layer catch one changed token wherever it lands? For greedy answer indices
k of a live run, the layer runs against a :class:`kdgate.fault_proxy.FaultProxy` that changes one
clear-winner token in the k-th greedy completion answer, and must fail in the test that
received it. The k-th answer is the clean run's: each run changes the answer to that
request (the same body, the same occurrence), whatever order concurrent answers leave in.

    python -m kdgate.token_fault_sweep [--upstream URL] [--count 30] [--ks 5,17,...]
        [--workdir DIR] [-- LIVE_PYTEST_ARGS]

Without ``--upstream`` the embedded llama.cpp server is started. Steps: one run records
snapshots through the proxy (``--snapshot-update``, into the work folder) and fills the
proxy's answer cache; a clean run from the cache must pass; then one run per k. Prints a
table (k, test, kind, caught, failing tests, seconds) and writes ``sweep.json``. Answers
of requests closed mid-stream by design and sampled answers of negative controls are
counted apart: no token is changed there.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kdgate.fault_proxy import Answer, FaultProxy

LIVE_RUN_LIMIT_S = 3600   # one live-layer run; a run past it is killed and counts as failed


def failed_tests(junit: Path) -> list[str]:
    """Names (function names, with parameters) of the tests that failed or errored."""
    from junitparser import Error, Failure, JUnitXml

    if not junit.is_file():
        return ["(no junit file: pytest did not finish)"]
    out = []
    for suite in JUnitXml.fromfile(str(junit)):
        for case in suite:
            if any(isinstance(r, (Failure, Error)) for r in case.result):
                out.append(case.name)
    return out


def live_run(endpoint: str, workdir: Path, name: str, extra: list[str], update: bool = False) -> dict:
    """One live-layer pytest run against ``endpoint``; returns rc, failing tests, seconds."""
    junit = workdir / f"{name}.xml"
    cmd = [sys.executable, "-m", "pytest", "--pyargs", "kdgate_suites", "-m", "live", "--endpoint", endpoint,
           "--snapshot-dir", str(workdir / "snapshots"), "-p", "no:cacheprovider", "-p", "no:randomly", "-q",
           f"--junitxml={junit}", *(["--snapshot-update"] if update else []), *extra]
    started = time.monotonic()
    with open(workdir / f"{name}.log", "w") as log:
        try:
            rc = subprocess.call(cmd, cwd=workdir, stdout=log, stderr=subprocess.STDOUT, timeout=LIVE_RUN_LIMIT_S)
        except subprocess.TimeoutExpired:
            rc = -1     # killed: reported as a failed run, its log says how far it got
    return {"rc": rc, "failed": failed_tests(junit), "seconds": round(time.monotonic() - started, 1)}


def sender_test(answer: Answer) -> str:
    """The function name of the test that sent an answer (from its node id)."""
    return answer.test.rsplit("::", 1)[-1] or "(outside a test)"


def spread(answers: list[Answer], count: int) -> list[int]:
    """``count`` indices of greedy answers that hold a clear-winner token, evenly over the run,
    plus the middle such answer of every test that has one (so each test is hit)."""
    greedy = [a.greedy_index for a in answers if a.kind == "greedy" and a.changeable]
    if not greedy:
        return []
    step = max(1, len(greedy) // max(1, count))
    picks = set(greedy[::step][:count])
    by_test: dict[str, list[int]] = {}
    for a in answers:
        if a.kind == "greedy" and a.changeable:
            by_test.setdefault(sender_test(a), []).append(a.greedy_index)
    picks |= {ks[len(ks) // 2] for ks in by_test.values()}
    return sorted(picks)


def record_and_replay(upstream: str, workdir: Path, extra: list[str], progress=print) -> dict:
    """One record run through the proxy (snapshots into ``workdir``, the answer cache filled),
    then, if it passed, a clean run from the cache. Returns record, clean, cache and the
    clean run's answers ("error" set when either run failed)."""
    workdir.mkdir(parents=True, exist_ok=True)
    cache: dict = {}
    record_proxy = FaultProxy(upstream, cache=cache)
    with record_proxy as url:
        record = live_run(url, workdir, "record", extra, update=True)
    record["proxy_errors"] = record_proxy.errors[:20]
    progress(f"record run: rc {record['rc']}, {record['seconds']} s, failed {record['failed']}, "
             f"proxy errors {record['proxy_errors']}")
    out = {"record": record, "clean": None, "cache": cache, "answers": []}
    if record["rc"] != 0:
        out["error"] = f"the record run failed; see {workdir / 'record.log'}"
        return out
    clean_proxy = FaultProxy(upstream, cache=cache)
    with clean_proxy as url:
        out["clean"] = live_run(url, workdir, "clean", extra)
    out["answers"] = clean_proxy.answers
    progress(f"clean run from the cache: rc {out['clean']['rc']}, {out['clean']['seconds']} s, "
             f"failed {out['clean']['failed']}")
    if out["clean"]["rc"] != 0:
        out["error"] = f"the clean run failed: no fault can be judged against it; see {workdir / 'clean.log'}"
    return out


def run_with_change(upstream: str, cache: dict, workdir: Path, k: int, target: Answer | None,
                    extra: list[str]) -> dict:
    """One live run from ``cache`` with one token changed: in the answer to ``target``'s request
    (the clean run's k-th greedy answer), or, without a target, in the k-th greedy answer.
    Returns the row: which test got it, what changed, whether that test failed."""
    proxy = FaultProxy(upstream, cache=cache, change_token_at=None if target else k,
                       change_request=(target.key, target.occurrence) if target else None)
    with proxy as url:
        run = live_run(url, workdir, f"k{k}", extra)
    hit = proxy.changed()
    where = sender_test(hit) if hit else sender_test(target) if target else "(not reached)"
    changed = hit is not None and hit.changed_step is not None
    return {"k": k, "test": where, "kind": hit.kind if hit else "-",
            "changed": f"step {hit.changed_step}: {hit.note}" if changed else (hit.note if hit else "not reached"),
            "changed_step": hit.changed_step if hit else None,
            "caught": changed and run["rc"] != 0 and any(where in f for f in run["failed"]),
            "failed": run["failed"], "rc": run["rc"], "seconds": run["seconds"]}


def sweep(upstream: str, workdir: Path, count: int = 30, ks: list[int] | None = None,
          extra: list[str] | None = None, progress=print) -> dict:
    """Record, check clean, then one run per k; returns the rows and the run's census."""
    extra = list(extra or [])
    base = record_and_replay(upstream, workdir, extra, progress)
    census: dict[str, int] = {}
    for a in base["answers"]:
        kind = "greedy, no clear-winner token" if a.kind == "greedy" and not a.changeable else a.kind
        census[kind] = census.get(kind, 0) + 1
    result = {"record": base["record"], "clean": base["clean"], "answers": len(base["answers"]),
              "census": census, "rows": []}
    if "error" in base:
        result["error"] = base["error"]
        return result
    by_index = {a.greedy_index: a for a in base["answers"] if a.greedy_index is not None}
    for k in ks or spread(base["answers"], count):
        row = run_with_change(upstream, base["cache"], workdir, k, by_index.get(k), extra)
        result["rows"].append(row)
        progress(f"k {k}: {row['test']} ({row['kind']}, {row['changed']}): "
                 f"{'caught' if row['caught'] else 'NOT caught'} (rc {row['rc']}, {row['seconds']} s)")
    return result


def table(result: dict) -> str:
    lines = ["| k | test that received it | kind | token changed | caught | failing tests | s |",
             "|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        lines.append(f"| {r['k']} | {r['test']} | {r['kind']} | {r['changed']} | "
                     f"{'yes' if r['caught'] else 'NO'} | {', '.join(r['failed']) or '-'} | {r['seconds']} |")
    census = ", ".join(f"{n} {kind}" for kind, n in sorted(result["census"].items()))
    lines.append(f"\nCompletion answers in a clean run: {result['answers']} ({census}).")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(prog="python -m kdgate.token_fault_sweep", description=__doc__.split("\n\n")[0])
    ap.add_argument("--upstream", help="the real server (default: start the embedded llama.cpp server)")
    ap.add_argument("--count", type=int, default=30, help="answer indices spread over the run (default 30)")
    ap.add_argument("--ks", help="comma-separated answer indices instead of a spread")
    ap.add_argument("--workdir", type=Path, help="logs, snapshots, sweep.json (default: a new temporary folder)")
    args = ap.parse_args(argv)
    if args.count < 1:
        ap.error(f"--count must be >= 1, got {args.count}")
    try:
        ks = [int(k) for k in args.ks.split(",")] if args.ks else None
    except ValueError:
        ap.error(f"--ks must be comma-separated integers, got {args.ks!r}")
    workdir = (args.workdir or Path(tempfile.mkdtemp(prefix="kdgate-sweep-"))).resolve()
    if args.upstream:
        result = sweep(args.upstream, workdir, args.count, ks, extra)
    else:
        from kdgate.embedded_server import EmbeddedServer

        with EmbeddedServer() as client:
            result = sweep(client.base_url, workdir, args.count, ks, extra)
    (workdir / "sweep.json").write_text(json.dumps(result, indent=1))
    print(table(result))
    print(f"\nlogs and sweep.json in {workdir}")
    return 0 if result["rows"] and all(r["caught"] for r in result["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
