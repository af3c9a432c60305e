"""The nightly report: ``summary.json`` (machine-readable verdict per layer and figures),
``report.md`` and the same page as ``report.html``, with pictures under ``figures/``:

* kernel: scaled-ULP error histogram per input group (synthetic cases, real fixtures),
  kernel vs SGLang's Triton kernel;
* allocator: runs per 1k tokens after churn, patched vs unpatched vs plugin excluded;
* coverage: the ranks x hooks grid of each check;
* live: first-divergence position and tie gap per prompt;
* perf: speedup vs context, when the perf layer ran.
Verdict on top, an environment block (GPU, driver, torch, SGLang, kernel build, server).
"""

from __future__ import annotations

import html
import importlib.metadata
import json
import platform
import shutil
import subprocess
from pathlib import Path

import markdown

from kdgate.verdict import judged_counts

STATUS_MARK = {"passed": "PASS", "failed": "FAIL", "not run": "NOT RUN"}


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def host_environment() -> dict:
    """Where this process runs: host, versions, GPU, driver, kernel build."""
    env = {"host": platform.node(), "python": platform.python_version(),
           "torch": _version("torch"), "sglang": _version("sglang"), "kdtree-gate": _version("kdtree-gate")}
    try:
        import torch

        env["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none (no CUDA GPU)"
    except Exception as exc:      # torch missing or broken: say so, do not stop the report
        env["gpu"] = f"unknown ({type(exc).__name__})"
    if shutil.which("nvidia-smi"):
        done = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30)
        env["driver"] = done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout.strip() else "unknown"
    else:
        env["driver"] = "none"
    try:
        from kdtree.build import build_hash

        env["kernel_build"] = build_hash()
    except Exception as exc:
        env["kernel_build"] = f"unknown ({type(exc).__name__})"
    return env


def environment(args) -> dict:
    """Where the gate ran: :func:`host_environment` and the server the live layer used."""
    return {**host_environment(),
            "server": (getattr(args, "endpoint", None) or "embedded llama.cpp server (SmolLM2-135M)")
            if "live" in getattr(args, "layers", []) else "none (live layer not run)"}


def _load_data(report_dir: Path) -> dict[str, dict]:
    out = {}
    for path in sorted((report_dir / "data").glob("*.json")):
        try:
            out[path.stem] = json.loads(path.read_text())
        except json.JSONDecodeError:
            out[path.stem] = {"notes": [f"unreadable measurements file {path.name}"], "data": []}
    return out


def _figures(report_dir: Path, data: dict[str, dict]) -> list[tuple[str, str, str]]:
    """Draw what the data holds; returns (layer, title, relative path) per picture.
    Raises ImportError where matplotlib is not installed (GPU hosts often lack it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder = report_dir / "figures"
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.png"):
        old.unlink()
    made = []
    records = [r for layer in data.values() for r in layer.get("data", [])]

    def save(fig, name, layer, title):
        fig.tight_layout()
        fig.savefig(folder / name, dpi=110)
        plt.close(fig)
        made.append((layer, title, f"figures/{name}"))

    parity = [r for r in records if r.get("kind") == "parity"]
    groups = sorted({r["source"] for r in parity})
    if groups:
        fig, axes = plt.subplots(1, len(groups), figsize=(6 * len(groups), 3.6), squeeze=False)
        for ax, group in zip(axes[0], groups):
            rows = [r for r in parity if r["source"] == group]
            edges = [f"[{lo:g},{hi:g})" for lo, hi, _ in rows[0]["kernel"]["histogram"]]
            for offset, who, label in ((-0.2, "kernel", rows[0]["candidate"]), (0.2, "baseline", "SGLang Triton")):
                counts = [0] * len(edges)
                for r in rows:
                    if r.get(who):
                        for i, (_, _, n) in enumerate(r[who]["histogram"]):
                            counts[i] += n
                ax.bar([i + offset for i in range(len(edges))],
                       [c if c > 0 else float("nan") for c in counts],   # empty bins: no bar
                       width=0.4, label=label, log=True)
            ax.set_xticks(range(len(edges)), edges, rotation=30, fontsize=7)
            ax.set_title(f"{group}: {len(rows)} cases")
            ax.set_xlabel("scaled ULP error")
            ax.set_ylabel("elements")
            ax.legend(fontsize=7)
        save(fig, "kernel-ulp-histograms.png", "kernel", "Scaled-ULP error histograms, kernel vs SGLang Triton")

    alloc = [r for r in records if r.get("kind") == "allocator-contiguity"]
    if alloc:
        pages = sorted({r["page_size"] for r in alloc})
        arms = ["patched", "unpatched", "excluded"]
        fig, ax = plt.subplots(figsize=(6.5, 3.6))
        for k, arm in enumerate(arms):
            values = [next((r["runs_per_1k_tokens"] for r in alloc if r["page_size"] == p and r["arm"] == arm), 0)
                      for p in pages]
            ax.bar([i + (k - 1) * 0.27 for i in range(len(pages))], values, width=0.27, label=arm)
        ax.set_xticks(range(len(pages)), [f"page {p}" for p in pages])
        ax.set_ylabel("runs per 1k tokens (lower is better)")
        ax.set_yscale("log")
        ax.legend(fontsize=8)
        save(fig, "allocator-fragmentation.png", "allocator", "KV fragmentation after churn: patched vs unpatched")

    for n, grid in enumerate(r for r in records if r.get("kind") == "coverage-grid"):
        fig, ax = plt.subplots(figsize=(2 + 1.2 * len(grid["hooks"]), 1 + 0.35 * grid["tp_size"]))
        from matplotlib.colors import ListedColormap

        # exactly once is right (green); missing (red) and repeated (orange) are not
        ax.imshow([[min(c, 2) for c in row] for row in grid["grid"]],
                  cmap=ListedColormap(["#e57373", "#81c784", "#ffb74d"]), vmin=0, vmax=2, aspect="auto")
        for rank, row in enumerate(grid["grid"]):
            for h, count in enumerate(row):
                ax.text(h, rank, str(count), ha="center", va="center", fontsize=8)
        ax.set_xticks(range(len(grid["hooks"])), grid["hooks"], fontsize=8)
        ax.set_yticks(range(grid["tp_size"]), [f"rank {r}" for r in range(grid["tp_size"])], fontsize=7)
        ax.set_title(f"{grid.get('label', 'coverage')}: {'PASS' if grid['passed'] else 'FAIL'}", fontsize=9)
        save(fig, f"coverage-grid-{n}.png", "coverage", f"Coverage: ranks x hooks ({grid.get('label', '')})")

    ties = [r for r in records if r.get("kind") == "tie-verdict"]
    if ties:
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.6))
        tests = sorted({r["test"] for r in ties})
        for test in tests:
            rows = [r for r in ties if r["test"] == test]
            labels = [f"{r['test']}:{r['prompt']}" for r in rows]
            positions = [r["first_divergence"] if r["first_divergence"] is not None else r["tokens"] for r in rows]
            ax1.scatter(labels, positions, label=test, s=18)
            gaps = [(l, max(g for g in (r["stored_gap"], r["live_gap"]) if g is not None))
                    for l, r in zip(labels, rows) if r["stored_gap"] is not None or r["live_gap"] is not None]
            if gaps:
                ax2.scatter([g[0] for g in gaps], [g[1] for g in gaps], label=test, s=18)
        ax1.set_ylabel("first divergent token (= length when none)")
        ax2.set_ylabel("tie gap at the divergence (nats)")
        for ax in (ax1, ax2):
            ax.tick_params(axis="x", labelrotation=90, labelsize=6)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7)
        if not any(r["first_divergence"] is not None for r in ties):
            ax2.text(0.5, 0.5, f"no divergence: all {len(ties)} comparisons\nequal token for token",
                     ha="center", va="center", transform=ax2.transAxes)
            ax2.set_xticks([])
        save(fig, "live-divergence.png", "live", "Live: first-divergence positions and tie gaps per prompt")

    perf = [r for r in records if r.get("kind") == "perf" and r["bs"] == 1 and not r.get("mixed")]
    if perf:
        fig, (ax_s, ax_f) = plt.subplots(1, 2, figsize=(11, 3.8))
        for key in sorted({(r["n"], r["heads"], r["shape"]) for r in perf}):
            rows = sorted((r for r in perf if (r["n"], r["heads"], r["shape"]) == key), key=lambda r: r["ctx"])
            label = f"N {key[0]} H {key[1]} {key[2]}"
            timed = [r for r in rows if r.get("speedup")]
            if timed:
                ax_s.plot([r["ctx"] for r in timed], [r["speedup"] for r in timed], marker="o", label=label)
            ax_f.plot([r["ctx"] for r in rows], [r["roofline_fraction"] for r in rows], marker="o", label=label)
        ax_s.set(xscale="log", yscale="log", xlabel="context", ylabel="speedup over SGLang extend_attention_fwd")
        ax_f.set(xscale="log", xlabel="context", ylabel="fraction of roofline", ylim=(0, 1.05))
        for ax in (ax_s, ax_f):
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=6)
        save(fig, "perf-speedup.png", "perf", "Kernel speedup and fraction of roofline vs context (batch 1)")
    return made


def esc(value) -> str:
    """``value`` as text safe in both report.md and report.html: HTML's special characters,
    backticks and table bars escaped (failure messages, test ids and names come from
    outside)."""
    return (html.escape(str(value), quote=False).replace("`", "&#96;").replace("|", "&#124;")
            .replace("\n", " "))


def _pre(lines: list[str]) -> list[str]:
    """Measured notes as one preformatted block, every line escaped."""
    text = "\n".join(html.escape(line) for note in lines for line in str(note).splitlines() if line.strip())
    return [f"<pre>{text}</pre>", ""]


VERDICT_LINE = {
    "GO": "every piece of cutover evidence ran against the deployment and passed",
    "NO-GO": "a layer that ran failed, or a required layer did not pass",
    "INCOMPLETE": "nothing failed, but cutover evidence is missing (listed below); this is not a GO",
    "SELF-CHECK PASS": "the gate works on this host; this is not a cutover verdict",
    "SELF-CHECK FAIL": "the gate's own checks failed on this host; this is not a cutover verdict",
}


def render_markdown(summary: dict, notes: dict[str, list[str]], figures: list[tuple[str, str, str]]) -> str:
    verdict = summary["verdict"]
    title = "kdtree-gate verdict" if summary.get("combined_from") else "kdtree-gate nightly"
    lines = [f"# {title}: **{esc(verdict)}**", "",
             f"Profile **{esc(summary.get('profile', 'selfcheck'))}**: {VERDICT_LINE.get(verdict, '')}. "
             f"Exit code {summary.get('exit_code', '?')}.", ""]
    if summary.get("combined_from"):
        lines += ["Combined from:", ""] + [f"- {esc(s)}" for s in summary["combined_from"]] + [""]
    if summary.get("reasons"):
        lines += ["No-go because:" if summary.get("profile") == "cutover" else "Failed because:", ""]
        lines += [f"- {esc(r)}" for r in summary["reasons"]] + [""]
    if summary.get("evidence"):
        heading = "Cutover evidence" if summary.get("profile") == "cutover" else \
            "What a cutover run would need (this run's share)"
        lines += [f"## {heading}", "", "| evidence | status | from | what it takes |", "|---|---|---|---|"]
        for row in summary["evidence"]:
            lines.append(f"| {esc(row['requirement'])} | **{row['status'].upper()}** | {esc(row['from'] or '-')} | "
                         f"{esc(row['what'])} |")
        lines.append("")
        if summary.get("missing"):
            lines += ["Missing, and the command that supplies it:", ""]
            lines += [f"- **{esc(m['requirement'])}**: {esc(m['why'])}. Supply it with: {esc(m['command'])}"
                      for m in summary["missing"]]
            if summary.get("profile") == "cutover" and not summary.get("combined_from"):
                lines.append("- Runs from several hosts combine into one verdict: "
                             "kdtree-gate verdict gpu-run live-run")
            lines.append("")
    lines += ["## Layers", "",
              "| layer | verdict | judged what ships (passed / failed) | checked the gate (passed / failed) "
              "| skipped | seconds | notes |", "|---|---|---|---|---|---|---|"]
    for layer in summary["layers"]:
        counts = judged_counts(layer)
        note = "; ".join(layer["reasons"][:3])
        name = layer["name"] + (f" ({layer['run']})" if layer.get("run") else "")
        dep, gate = counts["deployment"], counts["gate"]
        lines.append(f"| {esc(name)} | **{STATUS_MARK[layer['status']]}** | {dep['passed']} / {dep['failed']} | "
                     f"{gate['passed']} / {gate['failed']} | {layer['skipped']} | {layer['wall_s']:.0f} | {esc(note)} |")
    if summary.get("figures_note"):
        lines += ["", f"*{esc(summary['figures_note'])}*"]
    lines += ["", "What ships: the kernel under test, the patch, and the server behind --endpoint with its "
              "records. The gate: negative controls, perturbed servers, the gate's own spawned workers and the "
              "embedded server, which never runs the kdtree kernel; these never count as cutover evidence.", "",
              f"Required layers: {esc(', '.join(summary['required']) or 'none')}. "
              f"Live runs: {summary['repeat']}; flips: {len(summary['flips'])}. "
              f"Wall time {summary['wall_s']:.0f} s.", ""]
    for layer in summary["layers"]:
        name = layer["name"]
        pictures = [f for f in figures if f[0] == name]
        layer_notes = notes.get(f"{name} ({layer['run']})" if layer.get("run") else name, [])
        if not pictures and not layer_notes and not layer["failures"]:
            continue
        lines += [f"## {esc(name)} ({STATUS_MARK[layer['status']]})", ""]
        for _, title, path in pictures:
            lines += [f"![{esc(title)}]({path})", "", f"*{esc(title)}*", ""]
        if layer["failures"]:
            lines += ["Failures:", ""] + [f"- {esc(f)}" for f in layer["failures"][:20]] + [""]
        if layer_notes:
            lines += _pre(layer_notes)
    lines += ["## Environment", "", "| | |", "|---|---|"]
    lines += [f"| {esc(k)} | {esc(v)} |" for k, v in summary["environment"].items()]
    options = {k: v for k, v in (summary.get("options") or {}).items() if v not in (None, [], "")}
    if options:
        lines.append("| options | " + esc(", ".join(f"{k}={v}" for k, v in options.items())) + " |")
    identities = [r for records in summary.get("measurements", {}).values() for r in records
                  if r.get("kind") == "server-identity"]
    if identities:
        ident = {k: v for k, v in identities[0].items() if k != "kind"}
        lines.append("| server identity | " + esc(", ".join(f"{k}={v}" for k, v in ident.items())) + " |")
    return "\n".join(lines) + "\n"


HTML_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>kdtree-gate nightly: {verdict}</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:3px 8px;font-size:14px}}img{{max-width:100%}}
pre{{background:#f6f6f6;padding:8px;font-size:12px;overflow-x:auto}}</style></head>
<body data-verdict="{verdict}">
{body}
<script>
window.addEventListener("load", function () {{
  var imgs = Array.from(document.images);
  document.body.dataset.imagesLoaded = imgs.filter(function (i) {{ return i.complete && i.naturalWidth > 0; }}).length;
  document.body.dataset.imagesTotal = imgs.length;
}});
</script>
</body></html>
"""


def redraw(report_dir: Path) -> Path:
    """Draw a report again from its summary.json alone (e.g. on a workstation, for a GPU host
    that had no matplotlib). A summary of an older kdtree-gate (no profile, no test records)
    is judged again by the selfcheck profile: such a run is no cutover evidence."""
    summary = json.loads((report_dir / "summary.json").read_text())
    for key in ("figures", "figures_note"):
        summary.pop(key, None)
    if "profile" not in summary:
        from kdgate.verdict import evaluate

        summary.setdefault("options", {})
        summary["notes"] = {layer: d.get("notes", []) for layer, d in _load_data(report_dir).items()}
        summary.pop("no_go_reasons", None)
        summary = {**summary, "profile": "selfcheck", "schema": 2,
                   **evaluate([summary], "selfcheck", summary.get("required", []))}
    return write_report(report_dir, summary, from_summary=True)


def write_report(report_dir: Path, summary: dict, from_summary: bool = False) -> Path:
    """Write summary.json, figures/, report.md and report.html; returns the HTML path. The
    notes and measurements come from the layers' files under data/, or, ``from_summary``,
    from ``summary`` itself."""
    if not from_summary:
        data = _load_data(report_dir)
        # per-test records live in each layer's "tests" (nightly.run_layer), not among the figures
        summary = {**summary, "notes": {layer: d.get("notes", []) for layer, d in data.items()},
                   "measurements": {layer: [r for r in d.get("data", []) if r.get("kind") != "test-outcome"]
                                    for layer, d in data.items()}}
    data = {layer: {"data": records} for layer, records in summary.get("measurements", {}).items()}
    try:
        figures = _figures(report_dir, data)
        note = None
    except ImportError as exc:
        figures, note = [], (f"pictures not drawn here ({exc}); draw them on any machine with "
                             f"`kdtree-gate report {report_dir}`")
    summary = {**summary, "figures": [path for _, _, path in figures], "figures_note": note}
    (report_dir / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    text = render_markdown(summary, summary.get("notes", {}), figures)
    (report_dir / "report.md").write_text(text)
    body = markdown.markdown(text, extensions=["tables"])
    html_path = report_dir / "report.html"
    html_path.write_text(HTML_PAGE.format(verdict=esc(summary["verdict"]), body=body))
    return html_path
