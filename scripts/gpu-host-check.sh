#!/usr/bin/env bash
# The gate on a GPU host from an installed wheel, outside any checkout: what a release engineer
# runs on the test host. Usage: scripts/gpu-host-check.sh WHEEL_DIR OUT_DIR [STEP ...]
#   WHEEL_DIR  the kdtree-gate wheel and the wheels it needs that the host lacks (pip --no-index);
#              a sglang-slim.tgz there is unpacked beside them (SGLang's Triton kernels only)
#   OUT_DIR    logs, the nightly reports (gpu-run/, broken-run/), a table of steps (steps.md)
#              and all of it as results.tgz
#   STEP       prebuilt, cuobjdump, plugins, gpu-run, gpu-graph, gpu-kernel, broken-run
#              (default: prebuilt cuobjdump plugins gpu-run broken-run, in this order); gpu-graph and
#              gpu-kernel are gpu-run's two layers as separate runs (combine them with `kdtree-gate verdict`)
#   XDIST_WORKERS  pytest-xdist workers per layer (default 4)
# Steps: install into a fresh target folder; the prebuilt library with nvcc hidden (it must load,
# name its build, and hold parity on the fixtures); cuobjdump of the shipped library; the plugin's
# options beside the host's pytest plugins; the cutover profile's kernel and graph layers (expected
# INCOMPLETE, exit 3: no endpoint); a broken kernel through --kernel (expected NO-GO, exit 1).
set -u
WHEELS=$(cd "$1" && pwd); OUT=$(mkdir -p "$2" && cd "$2" && pwd); shift 2
STEPS=("$@"); [ ${#STEPS[@]} -gt 0 ] || STEPS=(prebuilt cuobjdump plugins gpu-run broken-run)
WORKERS=${XDIST_WORKERS:-4}
SITE=$(mktemp -d)/site; WORK=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$WHEELS"/*.whl \
    >"$OUT/pip.log" 2>&1 || { tail -20 "$OUT/pip.log"; exit 1; }
[ -f "$WHEELS/sglang-slim.tgz" ] && tar xzf "$WHEELS/sglang-slim.tgz" -C "$SITE"
export PYTHONPATH=$SITE PYTHONUNBUFFERED=1 KDTREE_BUILD_DIR=$WORK/kbuild
cd "$WORK"   # outside any checkout: nothing here but what the wheel installed
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"

declare -A rc secs
step() {  # name limit command...
    local name=$1 limit=$2; shift 2
    local t0=$(date +%s)
    timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
    rc[$name]=$?; secs[$name]=$(( $(date +%s) - t0 ))
    tail -15 "$OUT/$name.log"
}
NO_NVCC_PATH=$(echo "$PATH" | tr ':' '\n' | while read -r d; do [ -x "$d/nvcc" ] || echo "$d"; done | paste -sd:)
run_named() {
    case $1 in
    prebuilt) step prebuilt 300 env PATH="$NO_NVCC_PATH" CUDA_HOME=/nonexistent KDTREE_NVCC= python3 -c "$PREBUILT_CHECK" ;;
    cuobjdump) step cuobjdump 60 cuobjdump --list-elf --list-ptx "$SITE/kdtree/prebuilt/libkdtree_verify.so" ;;
    plugins) step plugins 120 python3 -m pytest --help
             grep -q -- "--endpoint" "$OUT/plugins.log" && grep -q -- "--snapshot-dir" "$OUT/plugins.log" || rc[plugins]=9 ;;
    gpu-run) step gpu-run 560 python3 -m kdgate.nightly nightly --profile cutover --layers kernel,graph \
                 --report-dir "$OUT/gpu-run" -- -n "$WORKERS" ;;
    gpu-graph|gpu-kernel)
             step "$1" 560 python3 -m kdgate.nightly nightly --profile cutover --layers "${1#gpu-}" \
                 --report-dir "$OUT/$1" -- -n "$WORKERS" ;;
    broken-run) step broken-run 300 python3 -m kdgate.nightly nightly --profile cutover --layers kernel \
                    --kernel kdgate.broken_kernels:mask_shift --report-dir "$OUT/broken-run" \
                    -- -n "$WORKERS" -k "test_parity or test_fixture_parity" ;;
    *) echo "unknown step $1"; exit 2 ;;
    esac
}
PREBUILT_CHECK="
import subprocess, sys
from kdtree import build
import kdtree.verify_op as op
try:
    build.nvcc_path(); sys.exit('nvcc is still visible')
except FileNotFoundError:
    pass
record = build.prebuilt()
assert record is not None, 'no prebuilt library matching the installed sources'
print('prebuilt', record['build'], record['targets'], record['ptx'], record['nvcc'])
print('library', build.library_path(), 'build hash', build.build_hash())
print('code arch on this GPU', op.code_capability(op._library(), 0))
sys.exit(subprocess.call([sys.executable, '-m', 'pytest', '--pyargs', 'kdgate_suites.kernel.test_fixtures',
                          'kdgate_suites.kernel.test_parity', '-m', 'kernel', '-q', '-p', 'no:cacheprovider', '-n', '$WORKERS']))
"
for s in "${STEPS[@]}"; do run_named "$s"; done
echo
echo "| step | exit | seconds |"; echo "|---|---|---|"
for s in "${STEPS[@]}"; do echo "| $s | ${rc[$s]:-not run} | ${secs[$s]:-} |"; done | tee "$OUT/steps.md"
tar czf "$WORK/results.tgz" -C "$OUT" . && mv "$WORK/results.tgz" "$OUT/"
