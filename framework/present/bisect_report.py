"""The report of a bisection (`python -m framework bisect`): the metric along the versions and what was found.

Reads the run directory's bisect.json and writes bisect.md and bisect.png beside it: every launch's value of
each probed version, their geometric means, the first bad version marked, and a table of the comparisons.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from framework.present.format import sig


def plot(summary: dict[str, Any], path: Path) -> None:
    """The metric along the versions (matplotlib, Agg): launches as dots, geometric means as a line."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    versions = summary["versions"]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.35 * len(versions) + 3), 3.6))
    xs = [v["index"] for v in versions if v["launches"]]
    ax.plot(xs, [v["mean"] for v in versions if v["launches"]], "-o", color="C0", label="geometric mean")
    for v in versions:
        if v["values"]:
            ax.plot([v["index"]] * len(v["values"]), v["values"], ".", color="C0", alpha=0.3, ms=4)
    if summary.get("first_bad") is not None:
        bad = next(v["index"] for v in versions if v["version"] == summary["first_bad"])
        ax.axvline(bad - 0.5, color="C3", ls="--", label=f"first bad: {summary['first_bad']}")
    step = max(1, len(versions) // 16)
    ax.set_xticks([v["index"] for v in versions][::step])
    ax.set_xticklabels([v["version"] for v in versions][::step], rotation=45, ha="right", fontsize=8)
    ax.set_xlabel("version (unprobed versions have no point)")
    ax.set_ylabel(summary["metric"])
    ax.set_title(f"bisection {summary.get('id', '')}: {summary['outcome']}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def markdown(summary: dict[str, Any]) -> str:
    names = [v["version"] for v in summary["versions"]]
    lines = [f"# Bisection {summary.get('id', '')}: {summary['outcome']}", ""]
    if summary["outcome"] == "named":
        st = summary["step"]
        lines.append(f"First bad version **{summary['first_bad']}**"
                     + (f" (commit {summary['first_bad_commit']})" if summary.get("first_bad_commit") else "")
                     + f", last good {summary['last_good']}: {summary['metric']} x{sig(st['ratio'])} "
                     f"[{sig(st['ci'][0])}, {sig(st['ci'][1])}] ({st['level']:.0%} Welch interval on log launch "
                     f"values); the step carries {st['share_of_total']:.0%} of the ends' change.")
    else:
        lines.append(summary["reason"])
    lines += ["", f"Threshold {summary['threshold']:g}, margin {summary['margin']:g}, alpha {summary['alpha']:g} "
                  f"(ends {summary['alpha_ends']:.4g}; each of at most {summary['probe_budget']} probes "
                  f"{summary['alpha_probe']:.4g}). Launches: {summary['launches_spent']} (a linear scan at the same "
                  f"launches per version: {summary['linear_scan_launches']}); GPU-hours "
                  f"{summary.get('gpu_hours', 0):.3g} (linear scan {summary.get('linear_scan_gpu_hours', 0):.3g}).",
              "", "![metric along the versions](bisect.png)", "",
              "| comparison | version | launches | log contrast | interval | call |", "|---|---|---|---|---|---|"]
    for c in summary["compared"]:
        lo, hi = c.get("lo"), c.get("hi")
        lines.append(f"| {c['role']} | {names[c['version']]} | {c['launches']} | {c['estimate']:+.4f} | "
                     f"[{'-inf' if lo is None else f'{lo:+.4f}'}, {'inf' if hi is None else f'{hi:+.4f}'}] | "
                     f"{c['call'] or 'undecided'} |")
    lines += ["", "| version | launches | failed | geometric mean |", "|---|---|---|---|"]
    for v in summary["versions"]:
        if v["launches"] or v["failed"]:
            lines.append(f"| {v['version']} | {v['launches']} | {v['failed']} | {sig(v['mean'])} |")
    return "\n".join(lines) + "\n"


def write_bisect_report(run_dir: Path) -> Path:
    """bisect.md and bisect.png in `run_dir`, from its bisect.json; returns the Markdown's path."""
    summary = json.loads((Path(run_dir) / "bisect.json").read_text(encoding="utf-8"))
    plot(summary, Path(run_dir) / "bisect.png")
    out = Path(run_dir) / "bisect.md"
    out.write_text(markdown(summary), encoding="utf-8")
    return out
