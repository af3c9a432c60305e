#!/usr/bin/env bash
# The shipped build measured on whatever GPU the device tool lends (Session 44), in one call:
#   1. a ci-matrix perf baseline, written as $OUT/perf-<model>-wgmma.json (never over a
#      committed file); where no baseline of this GPU model is committed, it is copied into
#      baselines/ on the device so that step 2 finds it the way users' runs do;
#   2. the perf layer (`pytest -m perf`) against this model's committed baseline, by default;
#   3. the full matrix (`kdtree-gate bench --matrix full`), SGLang's kernels included, in
#      the time left ($OUT/bench.json, bench.md, bench.png).
# Each step's log comes back as $OUT/STEP.log (7 files in all: the device tool returns 8 at
# most); a table of exit codes and times is printed last. On an H100 the three steps took 44,
# 27 and 85 s (Session 44).
# Usage (repo root, .whl carried): bash docs/perf-h200-wgmma/experiments/device_bench_run.sh
set -u
FINAL=${OUT:-/tmp/out}
mkdir -p "$FINAL"
export PYTHONUNBUFFERED=1 KDTREE_BUILD_DIR=/tmp/kbuild
begin=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
    >/tmp/pip.log 2>&1 || { tail -20 /tmp/pip.log; exit 1; }
export PYTHONPATH=/tmp/site:$PWD:$PWD/kernels
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader
BASE=$(python3 -c "import sys; from kdgate.perf_baseline import committed_baseline; print(committed_baseline(sys.argv[1]))" "$GPU")
NEW="$FINAL/$(basename "$BASE")"
python3 -c "from kdtree.build import build_hash, library_path; print('build', build_hash(()), library_path())" \
    2>&1 | tail -20

declare -A rc secs
run_step() {  # name limit_s command...
    local name=$1 limit=$2; shift 2
    local t0=$(date +%s)
    timeout "$limit" "$@" >"$FINAL/$name.log" 2>&1
    rc[$name]=$?
    secs[$name]=$(( $(date +%s) - t0 ))
    tail -15 "$FINAL/$name.log"
}
run_step baseline 150 python3 -m kdgate.perf_bench --matrix ci --out /tmp/bench-ci --write-baseline "$NEW"
if [ ! -e "$BASE" ] && [ -f "$NEW" ]; then cp "$NEW" "$BASE"; echo "no committed baseline for $GPU: $NEW copied to $BASE"; fi
run_step perf-layer 200 python3 -m pytest -q -p no:cacheprovider -m perf -rfEs suites/perf \
    --gate-data /tmp/perf-layer.json
left=$(( 575 - ($(date +%s) - begin) ))
run_step bench-full "$left" python3 -m kdgate.perf_bench --matrix full --out /tmp/bench-full
cp /tmp/bench-full/bench.json /tmp/bench-full/bench.md /tmp/bench-full/bench.png "$FINAL/" 2>/dev/null
echo
echo "GPU: $GPU; baseline path $BASE"
echo "| step | exit | seconds |"
echo "|---|---|---|"
for s in baseline perf-layer bench-full; do echo "| $s | ${rc[$s]} | ${secs[$s]} |"; done
