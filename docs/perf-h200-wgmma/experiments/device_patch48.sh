#!/usr/bin/env bash
# Patch 48 on the device (Session 42): one call that installs the carried wheels (.whl: SGLang
# 0.5.23 and what its Triton kernels import, syrupy, hypothesis, rich), builds the tree, its
# KDTREE_ROWS_NO_COPIER build and the gate's fault and format builds in parallel, then runs the
# named steps, each under its own time limit:
#   parity     the kernel layer's parity, running-maximum and split/combine tests (-m kernel)
#   ab         same-run A/B, full matrix and the layer loop, against KDTREE_ROWS_NO_COPIER
#   ab-rows    the same on the cases the rows kernel runs (64 and 128 rows), twice the replays
#   ab-prev    the full matrix against the tree of .kbuild/prev (`git archive` of a commit),
#              when carried: the first run's A/B (every rows-kernel call on the copier)
#   bench200   `kdtree-gate bench` of the 200x case (bs 1, ctx 64k, N 16, H 8), SGLang included
#   memcheck, racecheck   compute-sanitizer over kdgate.sanitize_run (racecheck --quick)
#   layers     the kernel and graph layers
# Logs come back as $OUT/STEP.log (copied as each step ends) and $OUT/run.tgz, the A/B tables
# as $OUT/ab*.md; a short table of exit codes and times is printed last; the exit code is the
# worst step's.
# Usage (repo root, .whl and .kbuild/prev carried): bash docs/perf-h200-wgmma/experiments/device_patch48.sh STEP...
set -u
FINAL=${OUT:-/tmp/out}
OUT=/tmp/run
mkdir -p "$OUT" "$FINAL"
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(parity ab memcheck)
export PYTHONUNBUFFERED=1 KDTREE_BUILD_DIR=/tmp/kbuild
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    >"$OUT/pip.log" 2>&1 || { tail -20 "$OUT/pip.log"; exit 1; }
export PYTHONPATH=/tmp/site:$PWD:$PWD/kernels
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader
PREV=.kbuild/prev

start=$(date +%s)
python3 - <<'PY' 2>&1 | tee "$OUT/build.log"
from concurrent.futures import ThreadPoolExecutor
from kdgate import broken_kernels, shipped_builds
from kdtree.build import build_hash, library_path, source_tree
gate = {fn.defines for module in (broken_kernels, shipped_builds) for fn in vars(module).values()
        if isinstance(getattr(fn, "defines", None), tuple)}
import os
prev = [((), source_tree(".kbuild/prev"))] if os.path.isdir(".kbuild/prev") else []
jobs = [((), None), (("KDTREE_ROWS_NO_COPIER",), None), *prev, *[(d, None) for d in sorted(gate)]]
with ThreadPoolExecutor(len(jobs)) as pool:
    for (d, root), path in zip(jobs, pool.map(lambda j: library_path(*j), jobs)):
        print(f"build {build_hash(d, root)} {'+'.join(d) or 'default'}{' (prev tree)' if root else ''}: {path}")
PY
echo "builds: $(( $(date +%s) - start )) s"

declare -A rc secs
run_step() {  # name limit_s command...
    local name=$1 limit=$2; shift 2
    local t0=$(date +%s)
    timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
    rc[$name]=$?
    secs[$name]=$(( $(date +%s) - t0 ))
    cp "$OUT/$name.log" "$FINAL/"   # each step's log comes back even if a later step runs past the call's limit
    tail -25 "$OUT/$name.log"
}
PARITY="suites/kernel/test_parity.py suites/kernel/test_running_max.py suites/kernel/test_split_combine.py"
ROWS=bs1-ctx1k-n16-h8,bs1-ctx4k-n16-h8,bs1-ctx16k-n16-h8,bs1-ctx64k-n16-h8,bs1-ctx128k-n16-h8,bs1-ctx1k-n8-h16,bs1-ctx4k-n8-h16,bs1-ctx16k-n8-h16,bs1-ctx64k-n8-h16,bs1-ctx128k-n8-h16,bs1-ctx16k-n8-h8,bs1-ctx64k-n8-h8,bs1-ctx128k-n8-h8,bs1-ctx64k-n4-h16,bs4-ctx,bs8-ctx
for s in "${steps[@]}"; do
    case $s in
        parity) run_step parity 240 python3 -m pytest -q -p no:cacheprovider -n 4 -m kernel -rfEs $PARITY ;;
        ab) run_step ab 300 python3 -m kdgate.build_ab --matrix full --loop-layers 61 --out "$OUT/ab" \
                --against no-copier=KDTREE_ROWS_NO_COPIER ;;
        ab-rows) run_step ab-rows 240 python3 -m kdgate.build_ab --matrix full --loop-layers 0 --reps 60 \
                --out "$OUT/ab-rows" --against no-copier=KDTREE_ROWS_NO_COPIER --only $ROWS ;;
        ab-prev) run_step ab-prev 300 python3 -m kdgate.build_ab --matrix full --loop-layers 61 --out "$OUT/ab-prev" \
                --against-tree prev=$PREV ;;
        bench200) run_step bench200 240 python3 -m kdgate.perf_bench --matrix full --only bs1-ctx64k-n16-h8-tree \
                --ceiling-samples 2 --out "$OUT/bench200" ;;
        memcheck) run_step memcheck 200 compute-sanitizer --tool memcheck --error-exitcode 1 \
                      python3 -m kdgate.sanitize_run ;;
        racecheck) run_step racecheck 300 compute-sanitizer --tool racecheck --error-exitcode 1 \
                       python3 -m kdgate.sanitize_run --quick ;;
        layers) run_step layers 420 python3 -m pytest -q -p no:cacheprovider -n 4 -m "kernel or graph" -rfEs \
                    suites/kernel suites/graph ;;
        *) echo "unknown step $s"; exit 2 ;;
    esac
done
echo
echo "| step | exit | seconds |"
echo "|---|---|---|"
for s in "${steps[@]}"; do echo "| $s | ${rc[$s]} | ${secs[$s]} |"; done
tar czf "$FINAL/run.tgz" -C "$OUT" .
for d in "$OUT"/ab*/; do [ -f "$d/ab.md" ] && cp "$d/ab.md" "$FINAL/$(basename "$d").md"; done
worst=0
for s in "${steps[@]}"; do [ "${rc[$s]}" -gt "$worst" ] && worst=${rc[$s]}; done
exit "$worst"
