"""Where a kernel's instructions before its first MMA come from (session 23): joins ncu's
per-instruction source counters with the source lines of the same build's SASS.

Inputs, from one build (the kernel's own flags; -lineinfo changes no code):

    # on the GPU host: one profiled launch of the layer loop's case, after two warm passes
    ncu --clock-control none --cache-control none -k regex:verify_rows --launch-skip 130 \\
        --launch-count 1 --section SourceCounters --warp-sampling-interval 0 -o rows \\
        python ncu_layer_loop.py
    ncu -i rows.ncu-rep --page source --csv --print-source sass > rows_source.csv
    # here: the SASS with its source lines
    nvcc -O3 -std=c++17 -cubin -lineinfo -gencode=arch=compute_90a,code=sm_90a \\
        -o k.cubin kernels/csrc/verify_api.cu
    nvdisasm -c -g k.cubin > k.sass

    python sass_profile.py rows_source.csv k.sass --function verify_rows_kernel --unit 288

`--unit`: the executions that make one per warp of the CTAs of interest (the loop's case:
36 CTAs with KV x 8 warps = 288); instructions run by every warp of the grid (`--all`,
default 132 x 8 = 1056) are counted once per warp too. Prints the static count before the
first MMA, the warp-sample stall reasons there, and the executed instructions per warp by
source line. Measured with it (f4be4e92d1a2, experiments README, Session 23): 1,310
instructions per warp of a CTA with KV before the first MMA, 444 of them the Q and first KV
tile copies.
"""
from __future__ import annotations

import argparse
import csv
import re
from collections import defaultdict


def sass_lines(path: str, function: str) -> dict[int, tuple[str, int]]:
    """Offset in the function -> (source file name, line), from `nvdisasm -c -g` output."""
    text = open(path).read()
    start = next((m.end() for m in re.finditer(r"^\.text\.(\S+):$", text, re.M) if function in m.group(1)), None)
    if start is None:
        raise SystemExit(f"--function {function!r}: no such function in {path}")
    end = text.find("\n\t.section", start)
    where, lines = None, {}
    for line in text[start:end if end > 0 else None].split("\n"):
        m = re.search(r'//## File "([^"]+)", line (\d+)', line)
        if m:
            where = (m.group(1).rsplit("/", 1)[-1], int(m.group(2)))
            continue
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+\S", line)
        if m:
            lines[int(m.group(1), 16)] = where
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("source_csv")
    ap.add_argument("sass")
    ap.add_argument("--function", default="verify_rows_kernel")
    ap.add_argument("--unit", type=int, default=288, help="executions that make one per warp of interest")
    ap.add_argument("--all", type=int, default=1056, help="executions by every warp of the grid")
    ap.add_argument("--top", type=int, default=20)
    args = ap.parse_args()

    rows = list(csv.reader(open(args.source_csv)))
    header = next(r for r in rows if r and r[0] == "Address")
    data = rows[rows.index(header) + 1:]
    col = {h: i for i, h in enumerate(header)}
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]

    def num(row, name):
        try:
            return float(row[col[name]].replace(",", ""))
        except ValueError:
            return 0.0

    source = sass_lines(args.sass, args.function)
    base = int(data[0][0], 16)
    first = next(k for k, r in enumerate(data) if "HGMMA" in r[1] or "WARPGROUP" in r[1])
    print(f"{first} of {len(data)} instructions lie before the first MMA")
    stalls = {x: sum(num(r, x) for r in data[:first]) for x in reasons}
    total = sum(num(r, "Warp Stall Sampling (All Samples)") for r in data)
    before = sum(num(r, "Warp Stall Sampling (All Samples)") for r in data[:first])
    print(f"warp samples before it: {before:.0f} of {total:.0f} ({100 * before / max(total, 1):.1f} %); "
          + ", ".join(f"{k[6:]} {v:.0f}" for k, v in sorted(stalls.items(), key=lambda x: -x[1])[:8]))
    per_line: dict = defaultdict(float)
    for r in data[:first]:
        executed = num(r, "Instructions Executed")
        if executed <= 0:
            continue
        where = source.get(int(r[0], 16) - base)
        per_line[where] += 1.0 if executed >= args.all else executed / args.unit
    print(f"executed per warp (units of {args.unit}; {args.all} or more counted once): {sum(per_line.values()):.0f}")
    for where, n in sorted(per_line.items(), key=lambda x: -x[1])[:args.top]:
        print(f"  {n:7.1f}  {where[0]}:{where[1]}" if where else f"  {n:7.1f}  (no line)")


if __name__ == "__main__":
    main()
