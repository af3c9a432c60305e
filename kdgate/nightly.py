"""``kdtree-gate nightly``: every layer this host can run, one go/no-go.

Each layer runs as its own pytest process (``pytest suites/<layer> -m <layer>``) with the
options given, writing JUnit XML, its measurements (``--gate-data``) and its log under
the report directory. Exit code 0 only when every layer that ran passed and every layer
named in ``--require`` ran and passed; a layer that could not run here (no GPU, no
endpoint) is listed as not run with the reason, never as passed. ``--repeat N`` runs the
live layer N times and fails it on any test whose outcome flips between runs.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from kdgate.layer_results import LayerResult, flips, outcomes, read_layer

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("kernel", "graph", "allocator", "coverage", "live", "perf")
DEFAULT_LAYERS = ("kernel", "graph", "allocator", "coverage", "live")
# options passed through, with their value, to every layer's pytest
PASSED_OPTIONS = ("endpoint", "api_key", "tp_size", "server_log", "journal_unit", "since",
                  "status_dir", "wait_ready", "systemd_unit", "kernel", "tie_eps", "expect_hooks",
                  "passkey_mode", "request_timeout", "perf_baseline", "perf_matrix", "perf_tolerance")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="kdtree-gate nightly", description=__doc__.splitlines()[0])
    parser.add_argument("--report-dir", default="reports/nightly", type=Path,
                        help="where the report goes (default reports/nightly)")
    parser.add_argument("--layers", default=",".join(DEFAULT_LAYERS),
                        help=f"comma-separated layers to run, of {', '.join(LAYERS)} (default: all but perf)")
    parser.add_argument("--perf", action="store_true", help="also run the perf layer")
    parser.add_argument("--require", default="",
                        help="comma-separated layers that must run and pass (else no-go)")
    parser.add_argument("--repeat", type=int, default=1, metavar="N",
                        help="run the live layer N times and fail it on any flip")
    parser.add_argument("--fixtures-dir", action="append", default=[], metavar="DIR")
    for name in PASSED_OPTIONS:
        parser.add_argument("--" + name.replace("_", "-"), default=None)
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
    args.layers, args.require = chosen, required
    return args


def pytest_command(layer: str, args: argparse.Namespace, junit: Path, data: Path) -> list[str]:
    cmd = [sys.executable, "-m", "pytest", f"suites/{layer}", "-m", layer, "-p", "no:cacheprovider",
           "-q", "-rs", f"--junitxml={junit}", f"--gate-data={data}"]
    for name in PASSED_OPTIONS:
        value = getattr(args, name)
        if value is not None:
            cmd += ["--" + name.replace("_", "-"), str(value)]
    for directory in args.fixtures_dir:
        cmd += ["--fixtures-dir", directory]
    return cmd


def run_layer(layer: str, args: argparse.Namespace, run_index: int = 0, progress=None) -> tuple[LayerResult, Path]:
    """Run one layer's pytest; returns its verdict and its JUnit file."""
    progress = progress or (lambda line: print(line, flush=True))
    out = args.report_dir
    suffix = "" if run_index == 0 else f"-run{run_index + 1}"
    junit, data, log = (out / "junit" / f"{layer}{suffix}.xml", out / "data" / f"{layer}{suffix}.json",
                        out / "logs" / f"{layer}{suffix}.log")
    for path in (junit, data, log):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
    if not (ROOT / "suites" / layer).is_dir():
        return LayerResult(layer, "not run", reasons=[f"the {layer} layer is not built yet (no suites/{layer})"]), junit
    started = next_note = time.monotonic()
    with open(log, "w") as sink, subprocess.Popen(pytest_command(layer, args, junit, data), cwd=ROOT,
                                                  stdout=sink, stderr=subprocess.STDOUT) as proc:
        while proc.poll() is None:
            time.sleep(1)
            if time.monotonic() >= next_note + 30:
                next_note = time.monotonic()
                lines = log.read_text(errors="replace").strip().splitlines()
                progress(f"  {layer}{suffix}: {next_note - started:.0f}s, log: {lines[-1][:100] if lines else '-'}")
    wall = time.monotonic() - started
    return read_layer(layer, junit, proc.returncode, wall, log.read_text(errors="replace")), junit


def go_no_go(results: list[LayerResult], required: list[str]) -> tuple[bool, list[str]]:
    """(go, reasons for no-go)."""
    reasons = [f"{r.name}: failed" for r in results if r.status == "failed"]
    by_name = {r.name: r for r in results}
    reasons += [f"{name}: required but {by_name[name].status}" for name in required
                if by_name[name].status != "passed"]
    if results and not any(r.status == "passed" for r in results):
        reasons.append("no layer ran here: nothing was checked")
    return not reasons, reasons


def main(argv: list[str] | None = None) -> int:
    from kdgate.nightly_report import environment, write_report

    args = parse_args(argv)
    args.report_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    results: list[LayerResult] = []
    flipped: list[str] = []
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
    go, why = go_no_go(results, args.require)
    summary = {"verdict": "GO" if go else "NO-GO", "no_go_reasons": why,
               "layers": [r.to_json() for r in results], "required": args.require,
               "repeat": args.repeat, "flips": flipped, "wall_s": time.monotonic() - started,
               "environment": environment(args)}
    report = write_report(args.report_dir, summary)
    print(f"[nightly] verdict {summary['verdict']}; report {report}", flush=True)
    return 0 if go else 1


USAGE = ("usage: kdtree-gate nightly [options]   run the layers, write the report (--help)\n"
         "       kdtree-gate report DIR           draw a report again from DIR/summary.json\n"
         "       kdtree-gate bench [options]      time the kernel vs SGLang and the roofline (--help)\n"
         "       kdtree-gate ab [options]         time the shipped kernel against builds with -D switches (--help)\n"
         "       kdtree-gate targets BENCH_JSON   issue #7's targets on a saved benchmark result\n"
         "       kdtree-gate limits BENCH_JSON    the bs-1 main kernel's fixed and per-tile time, fitted")


def cli(argv: list[str] | None = None) -> int:
    """``kdtree-gate nightly ...``, ``kdtree-gate report DIR``, ``kdtree-gate bench ...``,
    ``kdtree-gate ab ...``, ``kdtree-gate targets BENCH_JSON`` or ``kdtree-gate limits
    BENCH_JSON``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["bench"]:
        from kdgate.perf_bench import main as bench_main

        return bench_main(argv[1:])
    if argv[:1] == ["ab"]:
        from kdgate.build_ab import main as ab_main

        return ab_main(argv[1:])
    if argv[:1] == ["targets"]:
        from kdgate.perf_targets import main as targets_main

        return targets_main(argv[1:])
    if argv[:1] == ["limits"]:
        from kdgate.perf_limits import main as limits_main

        return limits_main(argv[1:])
    if argv[:1] == ["nightly"]:
        return main(argv[1:])
    if argv[:1] == ["report"] and len(argv) == 2:
        from kdgate.nightly_report import redraw

        folder = Path(argv[1])
        if not (folder / "summary.json").is_file():
            print(f"kdtree-gate report: {folder} has no summary.json (not a nightly report folder)",
                  file=sys.stderr)
            return 2
        print(redraw(folder))
        return 0
    print(USAGE, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(cli())
