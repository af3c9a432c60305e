"""Phase probe (session 22): per-CTA phase times of the rows kernel and the combine's span,
in the 61-call layer loop and in single flushed calls. Apply probe-phases.diff first (it adds
-DKDTREE_PROBE_PHASES hooks; without the define the kernel compiles as shipped), then
`python phase_probe.py [--per-cta] [EXTRA_DEFINE ...]` on the GPU host. --per-cta lists the
first and last CTAs to end (the stragglers) of the layer loop's last call."""
import ctypes, statistics, sys
import torch
from kdgate.gpu_timing import L2Flush, capture
from kdgate.perf_inputs import build_perf_inputs
from kdgate.perf_matrix import PerfCase
from kdtree import verify_op

PER_CTA = "--per-cta" in sys.argv
D = ("KDTREE_PROBE_PHASES",) + tuple(x for x in sys.argv[1:] if x != "--per-cta")
lib = verify_op._library(D)
MAIN = (ctypes.c_uint64 * (192 * 16))()
COMB = (ctypes.c_uint64 * (1024 * 4))()
NAMES = ["wait", "extent", "work", "prologue", "tile0", "loop", "epilogue"]


def read():
    torch.cuda.synchronize()
    assert lib.kdtree_probe_read(ctypes.byref(MAIN), ctypes.byref(COMB)) == 0
    main = [[MAIN[c * 16 + k] for k in range(16)] for c in range(192)]
    comb = [[COMB[c * 4 + k] for k in range(4)] for c in range(1024)]
    return main, comb


def report(label, ctas, combine_ctas):
    main, comb = read()
    rows = main[:ctas]
    t0 = min(r[8] for r in rows)
    ghz = statistics.median((r[7] - r[0]) / max(1, r[9] - r[8]) for r in rows if r[9] > r[8])
    def us(c): return c / ghz / 1000
    work = [r for r in rows if r[11] > 0 and r[7] and r[5]]
    idle = [r for r in rows if r[11] == 0 and r[7]]
    line = f"{label}: clock {ghz:.2f} GHz; main span {(max(r[9] for r in rows) - t0) / 1000:.2f} us " \
           f"(CTA entry spread {(max(r[8] for r in rows) - t0) / 1000:.2f}, after-wait first {(min(r[12] for r in rows) - t0) / 1000:.2f} " \
           f"last {(max(r[12] for r in rows) - t0) / 1000:.2f}); {len(work)} CTAs with KV, {len(idle)} without"
    print(line)
    waits = sorted((r[12] - r[8]) / 1000 for r in rows if r[12] and r[8])  # entry to after the wait
    if waits:
        at = lambda f: waits[min(len(waits) - 1, int(f * len(waits)))]  # noqa: E731
        print(f"   wait (globaltimer) over {len(waits)} CTAs: min {waits[0]:.2f} median {at(.5):.2f} "
              f"p75 {at(.75):.2f} max {waits[-1]:.2f} us")
    for name, group in (("with KV", work), ("without", idle)):
        if not group: continue
        segs = []
        for k, n in enumerate(NAMES, start=1):
            vals = [r[k] - r[k - 1] for r in group if r[k] and r[k - 1] and r[k] >= r[k - 1]]
            if name == "without" and n in ("prologue", "tile0", "loop"): continue
            if name == "without" and n == "epilogue":
                vals = [r[7] - r[3] for r in group if r[3] and r[7] >= r[3]]
            if vals: segs.append(f"{n} {us(statistics.median(vals)):.2f}")
        ends = [(r[9] - t0) / 1000 for r in group]
        print(f"   {name}: " + ", ".join(segs) + f"; ends at {statistics.median(ends):.2f} (max {max(ends):.2f}) us; tiles {statistics.median(r[11] for r in group)}")
    c = [x for x in comb[:combine_ctas] if x[0]]
    if c:
        print(f"   combine ({len(c)} CTAs): entry {(min(x[0] for x in c) - t0) / 1000:.2f}..{(max(x[0] for x in c) - t0) / 1000:.2f}, "
              f"after wait {(min(x[1] for x in c) - t0) / 1000:.2f}..{(max(x[1] for x in c) - t0) / 1000:.2f}, "
              f"before store {(min(x[2] for x in c if x[2]) - t0) / 1000:.2f}..{(max(x[2] for x in c) - t0) / 1000:.2f} us")


def dump(label, ctas):
    torch.cuda.synchronize()
    assert lib.kdtree_probe_read(ctypes.byref(MAIN), ctypes.byref(COMB)) == 0
    rows = [[MAIN[c * 16 + k] for k in range(16)] for c in range(ctas)]
    t0 = min(r[8] for r in rows)
    ghz = statistics.median((r[7] - r[0]) / max(1, r[9] - r[8]) for r in rows if r[9] > r[8])
    print(f"== {label} (clock {ghz:.2f} GHz); per CTA with KV: z, block, split, [j_begin, j_end), sm, "
          "entry / after-wait / end (us from first entry), phases us: extent work prologue tile0 loop epilogue")
    work = sorted((r for r in rows if r[11] > 0), key=lambda r: r[9])
    for r in work[:4] + [None] + work[-10:]:
        if r is None:
            print("   ..."); continue
        z = rows.index(r)
        ph = " ".join(f"{(r[k] - r[k - 1]) / ghz / 1000:5.2f}" for k in range(2, 8))
        print(f"   z {z:3d} b {z % 4} s {z // 4:2d} [{r[13]}, {r[14]}) sm {r[10]:3d}  {(r[8]-t0)/1000:5.2f} {(r[12]-t0)/1000:5.2f} {(r[9]-t0)/1000:5.2f}   {ph}")


def call(inputs, out):
    args, kwargs = inputs.call_args(out)
    return lambda: verify_op.launch_build(D, *args, **kwargs)


# the layer loop: 61 calls in one graph; the records are the last call's
layers = [build_perf_inputs(PerfCase(1, 1024, 8, 8, "tree"), "cuda", seed=k) for k in range(61)]
fns = [call(x, x.new_output()) for x in layers]
g = capture(lambda: [f() for f in fns])
for _ in range(10): g.replay()
torch.cuda.synchronize()
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
start.record(); [g.replay() for _ in range(20)]; end.record(); torch.cuda.synchronize()
print(f"layer loop (probe build): {start.elapsed_time(end) * 1000 / 20 / 61:.2f} us per call")
splits = verify_op.plan(1, 8, 8, torch.device("cuda"), lib)[0]
report("loop, last call", splits, 256)
if PER_CTA:
    dump("loop, last call", splits)

flush = L2Flush("cuda")
for case in (PerfCase(1, 1024, 8, 8, "tree"), PerfCase(1, 4096, 8, 8, "tree"), PerfCase(1, 16384, 8, 8, "tree"),
             PerfCase(1, 65536, 8, 8, "tree"), PerfCase(1, 131072, 8, 8, "tree"), PerfCase(1, 65536, 16, 8, "tree")):
    x = build_perf_inputs(case, "cuda")
    f = call(x, x.new_output())
    g = capture(f)
    for _ in range(3):
        flush(); g.replay()
    plan = verify_op.plan(case.bs, case.heads, case.n, torch.device("cuda"), lib)
    report(f"{case.id} flushed", plan[0], 1024)
