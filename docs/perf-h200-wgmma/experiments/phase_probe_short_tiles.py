"""Phase probe for patch 29 (session 25): the short layout's transposed tiles against the
padded 64-row MMAs (-DKDTREE_SHORT_ROWS_PADDED), in the layer loop and in flushed single calls
at ctx 1k and 4k. Apply 29-short-layout-transposed-tiles.diff, then
probe-phases-short-tiles.diff, and run `python phase_probe_short_tiles.py` on the GPU host.
Slots (clock64 unless named): 0 entry, 1 after the wait, 2 extent, 3 work, 4 prologue end,
5 first tile landed, 15 first tile's body done, 6 loop end, 7 end; globaltimer 8 entry,
9 end, 12 after the wait; 11 tiles, 13 j_begin, 14 j_end. Draft CTAs: j_end past the prefix."""
import ctypes, statistics
import torch
from kdgate.gpu_timing import L2Flush, capture, time_sequence
from kdgate.perf_inputs import build_perf_inputs
from kdgate.perf_matrix import PerfCase
from kdtree import verify_op

MAIN = (ctypes.c_uint64 * (192 * 16))()
COMB = (ctypes.c_uint64 * (1024 * 4))()
SEG = [("extent", 1, 2), ("work", 2, 3), ("prologue", 3, 4), ("tile0 wait", 4, 5), ("tile0 body", 5, 15),
       ("later tiles", 15, 6), ("epilogue", 6, 7)]


def report(lib, label, ctas, prefix):
    torch.cuda.synchronize()
    assert lib.kdtree_probe_read(ctypes.byref(MAIN), ctypes.byref(COMB)) == 0
    rows = [[MAIN[c * 16 + k] for k in range(16)] for c in range(ctas)]
    comb = [[COMB[c * 4 + k] for k in range(4)] for c in range(1024)]
    t0 = min(r[8] for r in rows if r[8])
    ghz = statistics.median((r[7] - r[0]) / max(1, r[9] - r[8]) for r in rows if r[9] > r[8])
    print(f"{label}: main span {(max(r[9] for r in rows) - t0) / 1000:.2f} us")
    for name, grp in (("prefix CTAs", [r for r in rows if r[11] > 0 and r[14] <= prefix]),
                      ("draft CTAs", [r for r in rows if r[11] > 0 and r[14] > prefix])):
        if not grp: continue
        segs = []
        for n, a, b in SEG:
            v = [r[b] - r[a] for r in grp if r[a] and r[b] and r[b] >= r[a]]
            if v: segs.append(f"{n} {statistics.median(v) / ghz / 1000:.2f}")
        ends = [(r[9] - t0) / 1000 for r in grp]
        waits = [(r[12] - t0) / 1000 for r in grp]
        print(f"   {name} ({len(grp)}, tiles {statistics.median(r[11] for r in grp)}): after wait {statistics.median(waits):.2f}; "
              + ", ".join(segs) + f"; end {statistics.median(ends):.2f} (max {max(ends):.2f})")
    c = [x for x in comb if x[0]]
    if c:
        print(f"   combine ({len(c)}): after wait {(min(x[1] for x in c) - t0) / 1000:.2f}..{(max(x[1] for x in c) - t0) / 1000:.2f}, "
              f"store {(min(x[2] for x in c if x[2]) - t0) / 1000:.2f}..{(max(x[2] for x in c) - t0) / 1000:.2f}")


for extra in ((), ("KDTREE_SHORT_ROWS_PADDED",)):
    D = ("KDTREE_PROBE_PHASES",) + extra
    lib = verify_op._library(D)
    name = "+".join(extra) or "transposed"
    def call(inputs, out):
        args, kwargs = inputs.call_args(out)
        return lambda: verify_op.launch_build(D, *args, **kwargs)
    # the layer loop: 61 calls in one graph (the probe's records are the last call's)
    layers = [build_perf_inputs(PerfCase(1, 1024, 8, 8, "tree"), "cuda", seed=k) for k in range(61)]
    fns = [call(x, x.new_output()) for x in layers]
    print(f"== {name}: layer loop {time_sequence(fns, reps=20):.2f} us per call")
    splits = verify_op.plan(1, 8, 8, torch.device("cuda"), lib)[0]
    report(lib, "loop, last call", splits, 1024)
    flush = L2Flush("cuda")
    for case in (PerfCase(1, 1024, 8, 8, "tree"), PerfCase(1, 4096, 8, 8, "tree")):
        x = build_perf_inputs(case, "cuda")
        f = call(x, x.new_output())
        g = capture(f)
        for _ in range(3):
            flush(); g.replay()
        report(lib, f"{case.id} flushed", verify_op.plan(1, 8, 8, torch.device("cuda"), lib)[0], case.ctx)
