"""Where a bs-1 call's main kernel spends its time, fitted on one saved benchmark result:
``kdtree-gate limits bench.json``.

At batch size 1 the plan gives every context length of a shape the same grid (row blocks x
splits, one wave of CTAs), and the busiest CTA's KV range grows with the context. So the
main kernel's time (``main_us``, replayed alone) over the cases of one (path, rows, splits)
group is close to a line, ``fixed + per_tile x tiles``, where ``tiles`` is the busiest
CTA's count of KV tiles. The fit separates what a call pays once per CTA (launch, Q staging,
the first tile's wait, the partial's write; the run's launch floor is part of it) from what
it pays per tile, and the per-tile time is set against the tile's two floors in this run:

- copy: the tile's KV bytes times the CTAs streaming at once, at the copy ceiling (each
  row block reads the KV again unless L2 serves it);
- matmul: the tile's FLOPs for the CTA's rows, at the matmul ceiling's share of one SM.

Only cases where nearly every split has KV (``BUSY_SHARE``) are fitted. That also leaves out
the short one-request calls of 33-64 rows that the rows kernel lays out in 16-row blocks
(kernels/csrc/wgmma/short_layout.cuh): it takes that layout only when the grid's layout
would leave half of its splits without KV.
"""

from __future__ import annotations

import math
import statistics
import sys
from dataclasses import dataclass

from kdgate.roofline import BYTES_PER_TOKEN, FLOP_PER_ROW_TOKEN
from kdgate.saved_result_command import run_on_saved_result


BUSY_SHARE = 0.95  # a point of a fit has at least this share of its group's most non-empty splits


@dataclass(frozen=True)
class PathShape:
    """A kernel path's query rows per CTA, KV positions per tile and fewest positions per
    split (kernels/csrc/split_plan.h)."""

    block_rows: int
    tile: int
    min_chunk: int


PATH_SHAPES = {
    "portable": PathShape(32, 32, 0),
    "tiled-32": PathShape(32, 32, 128), "tiled-64": PathShape(64, 32, 128),
    "wgmma-16": PathShape(16, 64, 128), "wgmma-32": PathShape(32, 64, 128), "wgmma-64": PathShape(64, 64, 128),
}


def split_work(ctx: int, splits: int, shape: PathShape) -> tuple[int, int]:
    """(KV tiles of the busiest split, splits with any positions) for a request of ``ctx``
    positions cut into ``splits``: equal chunks rounded up to whole tiles, at least
    ``min_chunk``, as the kernel cuts them; trailing splits may be empty."""
    chunk = max(math.ceil(math.ceil(ctx / splits) / shape.tile) * shape.tile, shape.min_chunk)
    return math.ceil(min(chunk, ctx) / shape.tile), min(splits, math.ceil(ctx / chunk))


@dataclass(frozen=True)
class TileFit:
    """One group's line, main_us = fixed_us + per_tile_us x tiles, and the tile's floors (µs)."""

    path: str
    rows: int
    splits: int
    ctas: int                    # CTAs with KV positions (row blocks x the most non-empty splits)
    tiles: tuple[int, ...]       # distinct busiest-CTA tile counts, ascending
    cases: int
    fixed_us: float
    per_tile_us: float
    copy_floor_us: float
    matmul_floor_us: float
    worst_residual_us: float

    @property
    def per_tile_over_floor(self) -> float:
        return self.per_tile_us / max(self.copy_floor_us, self.matmul_floor_us)


def fit_tiles(result: dict) -> list[TileFit]:
    """A line per (path, rows = N x H, splits) group of the result's bs-1, equal-length cases
    that run in one wave on the run's SMs, for groups with two or more tile counts. A fit
    takes the cases in which at least BUSY_SHARE of the group's most non-empty splits have
    positions, so its points differ in tiles per CTA, not in how many CTAs work. ValueError
    naming the field when ``result`` lacks what the fit needs."""
    if not isinstance(result, dict) or not isinstance(result.get("cases"), list):
        raise ValueError("result: expected a benchmark result with a 'cases' list")
    sms = (result.get("environment") or {}).get("sms")
    ceilings = result.get("ceilings") or {}
    if not sms or "copy_gbps" not in ceilings or "matmul_tflops" not in ceilings:
        raise ValueError("result: expected environment.sms and ceilings.copy_gbps / matmul_tflops")
    groups: dict[tuple[str, int, int], list[tuple[int, int, float]]] = {}
    for case in result["cases"]:
        shape = PATH_SHAPES.get(case.get("path"))
        if case["bs"] != 1 or case.get("mixed") or shape is None or case.get("main_us") is None:
            continue
        rows, splits = case["n"] * case["heads"], case["splits"]
        if math.ceil(rows / shape.block_rows) * splits > sms:
            continue  # more than one wave: the busiest CTA no longer sets the time
        groups.setdefault((case["path"], rows, splits), []).append(
            (*split_work(case["ctx"], splits, shape), case["main_us"]))
    fits = []
    for (path, rows, splits), work in sorted(groups.items()):
        busy = max(active for _, active, _ in work)
        points = [(t, us) for t, active, us in work if active >= BUSY_SHARE * busy]
        tiles = sorted({t for t, _ in points})
        if len(tiles) < 2:
            continue
        slope, intercept = statistics.linear_regression([t for t, _ in points], [us for _, us in points])
        shape = PATH_SHAPES[path]
        row_blocks = math.ceil(rows / shape.block_rows)
        ctas = row_blocks * busy
        copy_us = shape.tile * BYTES_PER_TOKEN * ctas / (ceilings["copy_gbps"] * 1e3)
        matmul_us = shape.tile * (rows / row_blocks) * FLOP_PER_ROW_TOKEN / (ceilings["matmul_tflops"] * 1e6 / sms)
        worst = max(abs(us - (intercept + slope * t)) for t, us in points)
        fits.append(TileFit(path, rows, splits, ctas, tuple(tiles), len(points), intercept, slope,
                            copy_us, matmul_us, worst))
    return fits


def describe(result: dict) -> str:
    """The fits as a Markdown table, with the run's launch floor for scale."""
    fits = fit_tiles(result)
    launch = (result.get("launch_floor") or {}).get("one_kernel_us")
    lines = ["Main kernel at bs 1, fitted as fixed + per tile x tiles of the busiest CTA "
             f"(one wave of CTAs; the cases where at least {BUSY_SHARE:.0%} of the most splits have "
             "positions; copy floor: every CTA streaming its own tile at the copy ceiling; "
             "matmul floor: the CTA's rows at one SM's share of the matmul ceiling"
             + (f"; the launch floor, {launch:.2f} µs, is part of the fixed cost" if launch is not None else "")
             + "):", "",
             "| path | rows (N·H) | splits | CTAs | tiles per CTA | cases | fixed µs | µs per tile | "
             "tile floor µs: copy / matmul | per tile ÷ larger floor | worst residual µs |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for f in fits:
        lines.append(f"| {f.path} | {f.rows} | {f.splits} | {f.ctas} | {', '.join(map(str, f.tiles))} | {f.cases} | "
                     f"{f.fixed_us:.1f} | {f.per_tile_us:.2f} | {f.copy_floor_us:.2f} / {f.matmul_floor_us:.2f} | "
                     f"{f.per_tile_over_floor:.2f} | {f.worst_residual_us:.1f} |")
    if not fits:
        lines.append("| (no bs-1 group with two or more tile counts in this run) | | | | | | | | | | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``kdtree-gate limits BENCH_JSON``: prints the table; exit 0, or 2 when the file is not
    a benchmark result with what the fit needs."""
    argv = list(sys.argv[1:] if argv is None else argv)
    return run_on_saved_result(argv, "limits", "the bs-1 main kernel's fixed and per-tile time",
                               lambda result: (describe(result), 0))


if __name__ == "__main__":
    sys.exit(main())
