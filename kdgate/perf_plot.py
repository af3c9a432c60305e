"""The benchmark's picture: time and fraction of roofline vs context, batch-1 cases.

Left: kdtree time and SGLang ``extend_attention_fwd`` time per (N, H) series (log-log).
Right: the kernel's fraction of the roofline floor per series.
"""

from __future__ import annotations

from pathlib import Path


def _series(cases: list[dict]) -> dict[tuple, list[dict]]:
    out: dict[tuple, list[dict]] = {}
    for c in cases:
        if c["bs"] == 1 and not c["mixed"]:
            out.setdefault((c["n"], c["heads"], c["shape"]), []).append(c)
    return {k: sorted(v, key=lambda c: c["ctx"]) for k, v in sorted(out.items())}


def plot_bench(result: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = _series(result["cases"])
    fig, (ax_t, ax_f) = plt.subplots(1, 2, figsize=(12, 4.8))
    cmap = plt.get_cmap("tab20")
    for i, ((n, heads, shape), rows) in enumerate(series.items()):
        ctx = [r["ctx"] for r in rows]
        colour = cmap(i % 20)
        label = f"N {n} H {heads} {shape}"
        ax_t.plot(ctx, [r["kernel"]["median_us"] for r in rows], marker="o", ms=3, color=colour, label=label)
        ext = [(r["ctx"], r["extend_us"]) for r in rows if r.get("extend_us")]
        if ext:
            ax_t.plot(*zip(*ext), ls="--", marker="x", ms=3, color=colour, alpha=0.6)
        ax_f.plot(ctx, [r["figures"]["roofline_fraction"] for r in rows], marker="o", ms=3,
                  color=colour, label=label)
    c = result["ceilings"]
    ax_t.set(xscale="log", yscale="log", xlabel="context (tokens)", ylabel="µs per call",
             title="bs 1: kdtree (solid) vs SGLang extend_attention_fwd (dashed)")
    ax_f.set(xscale="log", xlabel="context (tokens)", ylabel="fraction of roofline floor",
             title=f"roofline: copy {c['copy_gbps']:.0f} GB/s, matmul {c['matmul_tflops']:.0f} TFLOP/s",
             ylim=(0, 1.05))
    ax_f.axhline(0.6, color="grey", lw=0.8, ls=":")
    if series:
        ax_f.legend(fontsize=6, ncol=2)
    else:
        for ax in (ax_t, ax_f):
            ax.text(0.5, 0.5, "no batch-1 cases in this run", ha="center", va="center", transform=ax.transAxes)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
