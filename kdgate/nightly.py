"""``kdtree-gate``: the gate's command line (``nightly``, ``verdict``, ``report``, ``bench``,
``ab``, ``targets``, ``limits``).

``kdtree-gate nightly`` runs every layer this host can run, each as its own pytest process
over the installed layer suites, in the caller's working directory (relative paths in the
options are the caller's), writing JUnit XML, its measurements (``--gate-data``) and its log
under the report directory, then one verdict by profile (:mod:`kdgate.verdict`):

  GO 0 | NO-GO 1 | usage error 2 | INCOMPLETE 3 (cutover evidence missing) |
  SELF-CHECK PASS 0 / SELF-CHECK FAIL 1 (the selfcheck profile: never a cutover verdict)

A layer that could not run here (no GPU, no endpoint) is listed as not run with the reason,
never as passed. ``--repeat N`` runs the live layer N times and fails it on any test whose
outcome flips between runs. The API key reaches the layers through the environment
(``KDTREE_API_KEY``), never their command lines.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from kdgate.layer_results import LayerResult, flips, outcomes, read_layer
from kdgate.shipped import suites_dir
from kdgate.verdict import EXIT_USAGE, PROFILES, RunsDisagree, check_runs_agree, evaluate

LAYERS = ("kernel", "graph", "allocator", "coverage", "live", "perf")
DEFAULT_LAYERS = ("kernel", "graph", "allocator", "coverage", "live")
# options passed through, with their value, to every layer's pytest: name -> (type, help)
PASSED_OPTIONS = {
    "endpoint": (str, "URL of the server the live layer judges (default: the embedded server; "
                      "selects --profile cutover)"),
    "tp_size": (int, "tensor-parallel size the coverage layer requires (default: the server's tp_size)"),
    "server_log": (str, "the deployment's log file holding the [kdtree] coverage records"),
    "journal_unit": (str, "systemd unit whose journal holds the coverage records"),
    "since": (str, "with --journal-unit: passed to journalctl --since"),
    "status_dir": (str, "the plugin's KDTREE_STATUS_DIR on the serving host"),
    "wait_ready": (float, "wait up to SECONDS for the server to generate"),
    "systemd_unit": (str, "with --wait-ready: stop waiting when this unit failed"),
    "kernel": (str, "the kernel under test: kdtree (default), triton, module:callable or file.py:callable"),
    "tie_eps": (float, "near-tie threshold of the tie rule, nats (default 0.10)"),
    "expect_hooks": (str, "comma-separated hooks every rank must report effective (default defrag-sort)"),
    "passkey_mode": (str, "auto, absolute or relative"),
    "request_timeout": (float, "the longest the live layer waits for one answer, seconds"),
    "snapshot_dir": (str, "where the live layer's snapshots are read first and written (default ./snapshots)"),
    "perf_baseline": (str, "perf baseline file (default: the committed one of this GPU model)"),
    "perf_matrix": (str, "perf matrix: ci, full or smoke"),
    "perf_tolerance": (float, "largest allowed relative drop of a case's fraction of roofline"),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The options; everything after ``--`` goes to every layer's pytest (``-- -n 8 -x``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    argv, pytest_args = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    parser = argparse.ArgumentParser(prog="kdtree-gate nightly", description=__doc__.split("\n\n")[1],
                                     epilog="Arguments after -- are passed to every layer's pytest (say -- -n 8).",
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", choices=PROFILES, default=None,
                        help="cutover: judge the deployment (GO / NO-GO / INCOMPLETE; default with "
                             "--endpoint); selfcheck: check the gate on this host (default without)")
    parser.add_argument("--report-dir", default="reports/nightly", type=Path,
                        help="where the report goes (default reports/nightly)")
    parser.add_argument("--layers", default=",".join(DEFAULT_LAYERS),
                        help=f"comma-separated layers to run, of {', '.join(LAYERS)} (default: all but perf)")
    parser.add_argument("--perf", action="store_true", help="also run the perf layer")
    parser.add_argument("--require", default="",
                        help="comma-separated layers that must run and pass (else no-go)")
    parser.add_argument("--repeat", type=int, default=1, metavar="N",
                        help="run the live layer N times and fail it on any flip")
    parser.add_argument("--fixtures-dir", action="append", default=[], metavar="DIR",
                        help="captured verify calls the kernel layer also judges (repeatable)")
    parser.add_argument("--api-key", default=None,
                        help="bearer token for --endpoint (default $KDTREE_API_KEY); handed to the "
                             "layers through the environment, never printed")
    for name, (kind, text) in PASSED_OPTIONS.items():
        parser.add_argument("--" + name.replace("_", "-"), type=kind, default=None, help=text)
    args = parser.parse_args(argv)
    chosen = [x.strip() for x in args.layers.split(",") if x.strip()]
    if args.perf and "perf" not in chosen:
        chosen.append("perf")
    required = [x.strip() for x in args.require.split(",") if x.strip()]
    for label, names in (("--layers", chosen), ("--require", required)):
        unknown = sorted(set(names) - set(LAYERS))
        if unknown:
            parser.error(f"{label}: unknown layer(s) {unknown}; layers are {', '.join(LAYERS)}")
    missing = sorted(set(required) - set(chosen))
    if missing:
        parser.error(f"--require names layer(s) not being run: {missing}")
    if args.repeat < 1:
        parser.error(f"--repeat must be >= 1, got {args.repeat}")
    if args.tp_size is not None and args.tp_size < 1:
        parser.error(f"--tp-size must be >= 1, got {args.tp_size}")
    args.layers, args.require, args.pytest_args = chosen, required, pytest_args
    args.profile = args.profile or ("cutover" if args.endpoint else "selfcheck")
    args.report_dir = args.report_dir.resolve()
    return args


def pytest_command(layer: str, args: argparse.Namespace, junit: Path, data: Path) -> list[str]:
    """The layer's pytest command line (no secret on it: see :func:`layer_environment`)."""
    cmd = [sys.executable, "-m", "pytest", str(suites_dir() / layer), "-m", layer, "-p", "no:cacheprovider",
           "-q", "-rs", f"--junitxml={junit}", f"--gate-data={data}"]
    for name in PASSED_OPTIONS:
        value = getattr(args, name)
        if value is not None:
            cmd += ["--" + name.replace("_", "-"), str(value)]
    for directory in args.fixtures_dir:
        cmd += ["--fixtures-dir", directory]
    return cmd + list(getattr(args, "pytest_args", []))


def layer_environment(args: argparse.Namespace) -> dict[str, str]:
    """The layers' environment: this one, with the API key (if given) as KDTREE_API_KEY."""
    env = dict(os.environ)
    if args.api_key:
        env["KDTREE_API_KEY"] = args.api_key
    return env


def not_run_here(layer: str, args: argparse.Namespace) -> str | None:
    """Why the profile does not run ``layer`` here (None: it runs)."""
    if layer == "live" and args.profile == "cutover" and not args.endpoint:
        return "no --endpoint: a cutover run judges the deployment, never the embedded server"
    if not (suites_dir() / layer).is_dir():
        return f"the {layer} layer is not built (no {suites_dir() / layer})"
    return None


def run_layer(layer: str, args: argparse.Namespace, run_index: int = 0, progress=None) -> tuple[LayerResult, Path]:
    """Run one layer's pytest; returns its verdict (with its test records) and its JUnit file."""
    progress = progress or (lambda line: print(line, flush=True))
    out = args.report_dir
    suffix = "" if run_index == 0 else f"-run{run_index + 1}"
    junit, data, log = (out / "junit" / f"{layer}{suffix}.xml", out / "data" / f"{layer}{suffix}.json",
                        out / "logs" / f"{layer}{suffix}.log")
    for path in (junit, data, log):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
    why = not_run_here(layer, args)
    if why:
        return LayerResult(layer, "not run", reasons=[why]), junit
    started = next_note = time.monotonic()
    with open(log, "w") as sink, subprocess.Popen(pytest_command(layer, args, junit, data), env=layer_environment(args),
                                                  stdout=sink, stderr=subprocess.STDOUT) as proc:
        while proc.poll() is None:
            time.sleep(1)
            if time.monotonic() >= next_note + 30:
                next_note = time.monotonic()
                lines = log.read_text(errors="replace").strip().splitlines()
                progress(f"  {layer}{suffix}: {next_note - started:.0f}s, log: {lines[-1][:100] if lines else '-'}")
    wall = time.monotonic() - started
    result = read_layer(layer, junit, proc.returncode, wall, log.read_text(errors="replace"))
    if data.is_file():
        try:
            records = json.loads(data.read_text()).get("data", [])
        except json.JSONDecodeError:
            records = []
        result.tests = [{k: r[k] for k in ("test", "outcome", "judges", "message") if k in r}
                        for r in records if r.get("kind") == "test-outcome"]
    return result, junit


def run_options(args: argparse.Namespace) -> dict:
    """What the run was asked to judge (no secret): kept in summary.json."""
    return {"endpoint": args.endpoint, "tp_size": args.tp_size, "kernel": args.kernel,
            "fixtures_dirs": [str(Path(d).resolve()) for d in args.fixtures_dir],
            "coverage_source": args.server_log or (f"journal:{args.journal_unit}" if args.journal_unit else None)
            or args.status_dir, "api_key": "given" if args.api_key else None,
            "pytest_args": list(getattr(args, "pytest_args", []))}


def main(argv: list[str] | None = None) -> int:
    from kdgate.nightly_report import environment, write_report

    args = parse_args(argv)
    if not args.api_key:
        args.api_key = os.environ.get("KDTREE_API_KEY")
    args.report_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    results: list[LayerResult] = []
    flipped: list[str] = []
    print(f"[nightly] profile {args.profile}", flush=True)
    for layer in args.layers:
        print(f"[nightly] {layer} ...", flush=True)
        result, junit = run_layer(layer, args)
        if layer == "live" and args.repeat > 1 and result.status != "not run":
            runs = [outcomes(junit)]
            for k in range(1, args.repeat):
                print(f"[nightly] live, run {k + 1} of {args.repeat} ...", flush=True)
                runs.append(outcomes(run_layer(layer, args, k)[1]))
            flipped = flips(runs)
            if flipped:
                result.status = "failed"
                result.reasons = [f"outcome flipped between {args.repeat} runs (a gate bug): {f}"
                                  for f in flipped] + result.reasons
        print(f"[nightly] {layer}: {result.status} ({result.passed} passed, {result.failed} failed, "
              f"{result.skipped} skipped, {result.wall_s:.0f}s)" +
              (f" - {result.reasons[0]}" if result.status != "passed" and result.reasons else ""), flush=True)
        results.append(result)
    summary = {"schema": 2, "profile": args.profile, "layers": [r.to_json() for r in results],
               "required": args.require, "repeat": args.repeat, "flips": flipped,
               "wall_s": time.monotonic() - started, "options": run_options(args),
               "environment": environment(args)}
    summary.update(evaluate([summary], args.profile, args.require))
    report = write_report(args.report_dir, summary)
    for item in summary["missing"] if args.profile == "cutover" else []:
        print(f"[nightly] missing: {item['requirement']} - {item['why']}\n          supply it: {item['command']}",
              flush=True)
    print(f"[nightly] verdict {summary['verdict']} (exit {summary['exit_code']}); report {report}", flush=True)
    return summary["exit_code"]


def verdict_main(argv: list[str]) -> int:
    """``kdtree-gate verdict DIR [DIR ...]``: one cutover verdict over several nightly runs."""
    from kdgate.nightly_report import write_report

    parser = argparse.ArgumentParser(
        prog="kdtree-gate verdict",
        description="One cutover verdict over several nightly runs (say kernel + graph from a GPU host, "
                    "live + coverage from where the endpoint and the journal are). Refuses runs of "
                    "different kernel builds, --kernel candidates or server identities (exit 2). "
                    "Exit: GO 0, NO-GO 1, refused or usage 2, INCOMPLETE 3.")
    parser.add_argument("runs", nargs="+", type=Path, metavar="DIR", help="a nightly report folder (summary.json)")
    parser.add_argument("--report-dir", type=Path, default=None,
                        help="also write the combined report here (summary.json, report.md, report.html)")
    parser.add_argument("--require", default="", help="comma-separated layers that must have passed in some run")
    args = parser.parse_args(argv)
    runs = []
    for folder in args.runs:
        path = folder / "summary.json"
        if not path.is_file():
            print(f"kdtree-gate verdict: {folder} has no summary.json (not a nightly report folder)", file=sys.stderr)
            return EXIT_USAGE
        run = json.loads(path.read_text())
        if run.get("schema") != 2:
            print(f"kdtree-gate verdict: {path} is from an older kdtree-gate (no test records): run it again",
                  file=sys.stderr)
            return EXIT_USAGE
        run["source"] = f"{folder} ({run.get('environment', {}).get('host', '?')})"
        runs.append(run)
    try:
        check_runs_agree(runs)
    except RunsDisagree as exc:
        print(f"kdtree-gate verdict: refused: {exc}", file=sys.stderr)
        return EXIT_USAGE
    required = [x.strip() for x in args.require.split(",") if x.strip()]
    result = evaluate(runs, "cutover", required)
    for row in result["evidence"]:
        print(f"  {row['requirement']}: {row['status']}" + (f" (from {row['from']})" if row["from"] else ""))
    for item in result["missing"]:
        print(f"  missing: {item['requirement']} - {item['why']}\n    supply it: {item['command']}")
    for reason in result["reasons"]:
        print(f"  no-go: {reason}")
    if args.report_dir:
        args.report_dir.mkdir(parents=True, exist_ok=True)
        layers = [{**layer, "name": layer["name"], "run": run["source"]} for run in runs for layer in run["layers"]]
        summary = {"schema": 2, "profile": "cutover", "combined_from": [r["source"] for r in runs],
                   "layers": layers, "required": required, "repeat": 1, "flips": [],
                   "wall_s": sum(r.get("wall_s", 0) for r in runs), "options": runs[-1].get("options", {}),
                   "environment": runs[0].get("environment", {}),
                   "notes": {f"{layer['name']} ({run['source']})": (run.get("notes") or {}).get(layer["name"], [])
                             for run in runs for layer in run["layers"]},
                   "measurements": {k: v for run in runs for k, v in run.get("measurements", {}).items()},
                   **result}
        print(f"  report: {write_report(args.report_dir, summary, from_summary=True)}")
    print(f"kdtree-gate verdict: {result['verdict']} (exit {result['exit_code']})")
    return result["exit_code"]


USAGE = """usage: kdtree-gate COMMAND [options]

  nightly [options]     run the layers, write the report; --help for its options
  verdict DIR [DIR ...] one cutover verdict over several nightly runs (GPU host + endpoint host)
  report DIR            draw a report again from DIR/summary.json
  bench [options]       time the kernel against SGLang's kernels and the roofline (GPU)
  ab [options]          time the shipped kernel against builds with -D switches (GPU)
  targets BENCH_JSON    the performance targets on a saved benchmark result
  limits BENCH_JSON     the bs-1 main kernel's fixed and per-tile time, fitted

exit codes: GO 0 | NO-GO 1 | usage error or refused 2 | INCOMPLETE 3 (evidence missing);
the selfcheck profile: SELF-CHECK PASS 0 | SELF-CHECK FAIL 1
"""


# subcommands that live in their own module's main(argv)
GPU_COMMANDS = {"bench": "kdgate.perf_bench", "ab": "kdgate.build_ab", "targets": "kdgate.perf_targets",
                "limits": "kdgate.perf_limits"}


def cli(argv: list[str] | None = None) -> int:
    """The ``kdtree-gate`` entry point."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command, rest = (argv[0], argv[1:]) if argv else (None, [])
    if command in ("-h", "--help"):
        print(USAGE)
        return 0
    if command == "--version":
        from kdgate.nightly_report import _version

        print(f"kdtree-gate {_version('kdtree-gate')}")
        return 0
    if command in GPU_COMMANDS:
        import importlib

        return importlib.import_module(GPU_COMMANDS[command]).main(rest)
    if command == "nightly":
        return main(rest)
    if command == "verdict":
        return verdict_main(rest)
    if command == "report" and len(rest) == 1:
        from kdgate.nightly_report import redraw

        folder = Path(rest[0])
        if not (folder / "summary.json").is_file():
            print(f"kdtree-gate report: {folder} has no summary.json (not a nightly report folder)",
                  file=sys.stderr)
            return EXIT_USAGE
        print(redraw(folder))
        return 0
    print(USAGE, file=sys.stderr)
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(cli())
