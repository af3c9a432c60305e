#!/usr/bin/env bash
# Patch 47 on the device (Session 41): one call that installs the carried wheels (.whl: SGLang
# 0.5.23 and what its Triton kernels import, syrupy, hypothesis, rich), builds every library
# variant the steps use in parallel, then runs the named steps, each under its own time limit:
#   parity        the kernel layer's parity, running-maximum and split/combine tests (-m kernel)
#   parity-copies-after-pv, parity-qk-after-swap   the same for a switched build
#                 (overlap_variants.py, as --kernel)
#   ab            same-run A/B of patch 47 against KDTREE_ROWS_TILE_AFTER_TILE (the rows kernel)
#   ab-variants   the same plus the switched builds, the no-copy probe and the seesaw from 128 rows
#   memcheck, racecheck, and -qk-after-swap of each   compute-sanitizer over kdgate.sanitize_run
#   layers        the kernel and graph layers
# Apply 47b-overlapped-rows-kernel-switches.diff first (the switched, probe and seesaw steps
# need its switches). Logs come back as $OUT/run.tgz, the A/B tables as $OUT/ab*.md; a short
# table of exit codes and times is printed last.
# Usage (repo root, .whl carried): bash docs/perf-h200-wgmma/experiments/device_patch47.sh STEP...
set -u
FINAL=${OUT:-/tmp/out}  # what comes back: run.tgz (every log and A/B file) and the A/B tables
OUT=/tmp/run
mkdir -p "$OUT" "$FINAL"
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(parity ab memcheck)
export PYTHONUNBUFFERED=1 KDTREE_BUILD_DIR=/tmp/kbuild
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    >"$OUT/pip.log" 2>&1 || { tail -20 "$OUT/pip.log"; exit 1; }
export PYTHONPATH=/tmp/site:$PWD:$PWD/kernels
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader
nvcc --version | tail -1

start=$(date +%s)
python3 - <<'EOF' 2>&1 | tee "$OUT/build.log"
from concurrent.futures import ThreadPoolExecutor
from kdgate import broken_kernels, shipped_builds
from kdtree.build import build_hash, library_path
# the gate's own builds (fault and format candidates), then the A/B switches of the steps below
gate = {fn.defines for module in (broken_kernels, shipped_builds) for fn in vars(module).values()
        if isinstance(getattr(fn, "defines", None), tuple)}
variants = [(), ("KDTREE_ROWS_TILE_AFTER_TILE",), ("KDTREE_OVERLAP_COPIES_AFTER_PV",),
            ("KDTREE_OVERLAP_QK_AFTER_SWAP",), ("KDTREE_PROBE_OVERLAP_NO_COPIES",),
            ("KDTREE_SEESAW_FROM_128_ROWS",), *sorted(gate)]
with ThreadPoolExecutor(len(variants)) as pool:
    for v, path in zip(variants, pool.map(library_path, variants)):
        print(f"build {build_hash(v)} {'+'.join(v) or 'default'}: {path}")
EOF
echo "builds: $(( $(date +%s) - start )) s"

declare -A rc secs
run_step() {  # name limit_s command...
    local name=$1 limit=$2; shift 2
    local t0=$(date +%s)
    timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
    rc[$name]=$?
    secs[$name]=$(( $(date +%s) - t0 ))
    tail -25 "$OUT/$name.log"
}
CASES=bs1-ctx1k-n16-h8,bs1-ctx4k-n16-h8,bs1-ctx16k-n16-h8,bs1-ctx64k-n16-h8,bs1-ctx128k-n16-h8,bs1-ctx1k-n8-h16,bs1-ctx4k-n8-h16,bs1-ctx16k-n8-h16,bs1-ctx64k-n8-h16,bs1-ctx128k-n8-h16,n1-h128,bs4-ctx,bs8-ctx,bs1-ctx64k-n8-h8-tree
V=docs/perf-h200-wgmma/experiments/overlap_variants.py
PARITY="suites/kernel/test_parity.py suites/kernel/test_running_max.py suites/kernel/test_split_combine.py"
for s in "${steps[@]}"; do
    case $s in
        parity) run_step parity 240 python3 -m pytest -q -p no:cacheprovider -n 4 -m kernel -rfEs $PARITY ;;
        parity-copies-after-pv) run_step $s 200 python3 -m pytest -q -p no:cacheprovider -n 4 -m kernel -rfEs \
                       --kernel $V:copies_after_pv $PARITY ;;
        parity-qk-after-swap) run_step $s 200 python3 -m pytest -q -p no:cacheprovider -n 4 -m kernel -rfEs \
                       --kernel $V:qk_after_swap $PARITY ;;
        ab) run_step ab 240 python3 -m kdgate.build_ab --matrix full --loop-layers 0 --out "$OUT/ab" \
                --against rows=KDTREE_ROWS_TILE_AFTER_TILE --only $CASES ;;
        ab-variants) run_step ab-variants 240 python3 -m kdgate.build_ab --matrix full --loop-layers 0 \
                --out "$OUT/ab-variants" --against rows=KDTREE_ROWS_TILE_AFTER_TILE \
                --against copies-after-pv=KDTREE_OVERLAP_COPIES_AFTER_PV \
                --against qk-after-swap=KDTREE_OVERLAP_QK_AFTER_SWAP \
                --against no-copies-probe=KDTREE_PROBE_OVERLAP_NO_COPIES \
                --against seesaw128=KDTREE_SEESAW_FROM_128_ROWS --only $CASES ;;
        memcheck) run_step memcheck 200 compute-sanitizer --tool memcheck --error-exitcode 1 \
                      python3 -m kdgate.sanitize_run ;;
        memcheck-qk-after-swap) run_step $s 200 compute-sanitizer --tool memcheck --error-exitcode 1 \
                      python3 -m kdgate.sanitize_run --kernel $V:qk_after_swap ;;
        racecheck-qk-after-swap) run_step $s 240 compute-sanitizer --tool racecheck --error-exitcode 1 \
                       python3 -m kdgate.sanitize_run --quick --kernel $V:qk_after_swap ;;
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
