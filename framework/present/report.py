"""Reports: Markdown and a self-contained HTML page with figures, from a run, a multirun or a ledger.

`write_report(path)` accepts
- a run directory (`verdict.json`, `trials.jsonl`, `config.yaml`): writes `report.md`/`report.html` there;
- a multirun directory (job subdirectories with `verdict.json`, and `sweep_summary.json` if the
  sweep callback wrote it): one section per job plus the sweep table, written there;
- a ledger file (`verdicts.jsonl`): one section per verdict record, written next to it as
  `<stem>.report.md`/`<stem>.report.html`.

Figures (matplotlib, Agg): a forest plot of each prediction's ratio and the interval the decision
used against its margin or threshold (log x-axis; the equivalence region or the region beyond the
minimum effect shaded), per-condition launch means, and the sequential trajectory when the run
looked more than once. The HTML embeds them as base64 PNG; the Markdown links PNG files written to
`report_figures/`. The backend is stated at the top of every section: a simulated verdict is
evidence about the model, not about hardware.

The document is built as a list of blocks (pure) and rendered twice; only `write_report` does I/O.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from framework.core.spec import Hypothesis, parse_yaml, validate_model
from framework.core.trials import Trials
from framework.errors import ReportError, TrialsFileError
from framework.present import format as fmt
from framework.records import ledger
from framework.records.audit import environment_summary, resolve_trials
from framework.records.trials import read_json_object, read_trials

VERDICT_COLORS = {"supported": "#2e7d32", "refuted": "#c62828", "inconclusive": "#9e9e9e"}
FIG_DIR = "report_figures"


# --------------------------------------------------------------------------- blocks


@dataclass(frozen=True)
class Heading:
    level: int
    text: str


@dataclass(frozen=True)
class Banner:
    text: str
    note: str = ""


@dataclass(frozen=True)
class Para:
    text: str


@dataclass(frozen=True)
class Table:
    headers: list[str]
    rows: list[list[str]]


@dataclass(frozen=True)
class Figure:
    name: str  # file stem, unique within a report
    png: bytes
    caption: str


@dataclass(frozen=True)
class Pre:
    text: str


Block = Heading | Banner | Para | Table | Figure | Pre


# --------------------------------------------------------------------------- criteria (pure)


@dataclass(frozen=True)
class Criterion:
    """Where a prediction's ratio must lie to be supported: [lo, hi] (None = unbounded)."""

    lo: float | None
    hi: float | None
    text: str


def criteria(record: dict[str, Any]) -> dict[str, Criterion]:
    """Margins and thresholds of each prediction, from the hypothesis content the record holds."""
    content = (record.get("hypothesis") or {}).get("content")
    if not content:
        return {}
    try:
        h = validate_model(Hypothesis, parse_yaml(content, "recorded hypothesis"), "recorded hypothesis")
    except Exception:  # noqa: BLE001 - a report without thresholds is still a report
        return {}
    out: dict[str, Criterion] = {}
    for p in h.predictions:
        if p.kind == "equivalent":
            out[p.id] = Criterion(1 - p.margin, 1 + p.margin, f"within ±{p.margin:.0%} (equivalence)")
        elif p.kind == "increase":
            out[p.id] = Criterion(1 + p.min_effect, None, f"> {1 + p.min_effect:.2f} (at least +{p.min_effect:.0%})")
        elif p.kind == "decrease":
            out[p.id] = Criterion(None, 1 - p.min_effect, f"< {1 - p.min_effect:.2f} (at least -{p.min_effect:.0%})")
        elif p.kind == "interaction":
            if p.direction == "larger":
                out[p.id] = Criterion(1 + p.min_effect, None, f"ratio of ratios > {1 + p.min_effect:.2f}")
            else:
                out[p.id] = Criterion(None, 1 - p.min_effect, f"ratio of ratios < {1 - p.min_effect:.2f}")
        elif p.kind == "launches":
            out[p.id] = Criterion(None, None, f"{p.expect}" + (f", matching /{p.match}/" if p.match else ""))
        elif p.kind == "outputs":
            out[p.id] = Criterion(None, None, "every paired request identical" if p.min_agreement >= 1 else
                                  f"agreement >= {p.min_agreement:g} (share of identical paired requests)")
    return out


def _nice_ticks(lo: float, hi: float) -> list[float]:
    """Readable ratio ticks for a log axis: fine near 1 for narrow ranges, coarser for wide ones."""
    fine = [0.9, 0.95, 0.97, 0.98, 0.99, 1.0, 1.01, 1.02, 1.03, 1.05, 1.1, 1.15, 1.2]
    coarse = [0.1, 0.2, 0.3, 0.5, 0.7, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 4.0, 5.0, 10.0]
    ticks = [t for t in (fine if hi / lo < 1.3 else coarse) if lo <= t <= hi]
    while len(ticks) > 10:
        ticks = [t for i, t in enumerate(ticks) if i % 2 == 0 or t == 1.0]
    return ticks


# --------------------------------------------------------------------------- figures


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight", metadata={"Software": None})
    _plt().close(fig)
    return buf.getvalue()


def forest_plot(record: dict[str, Any]) -> bytes | None:
    """Each ratio prediction: estimate and interval on a log axis, against its margin or threshold."""
    preds = [p for p in record.get("predictions") or [] if isinstance(p.get("estimate"), (int, float))
             and p.get("estimate") and p["estimate"] > 0 and p.get("kind") not in ("launches", "outputs")]  # a share
    if not preds:
        return None
    crit = criteria(record)
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    plt = _plt()
    values = [1.0]
    for p in preds:
        values.append(p["estimate"])
        if p.get("ci"):
            values += [v for v in p["ci"] if isinstance(v, (int, float)) and 0 < v < math.inf]  # inf: to the edge
        c = crit.get(p["id"])
        if c:
            values += [v for v in (c.lo, c.hi) if v]
    lo, hi = min(values) / 1.06, max(values) * 1.06
    fig, ax = plt.subplots(figsize=(8.5, 0.9 + 0.85 * len(preds)))
    ax.set_xscale("log")
    ax.set_xlim(lo, hi)
    n = len(preds)
    for i, p in enumerate(preds):
        y = n - 1 - i
        c = crit.get(p["id"])
        if c and (c.lo or c.hi):
            a, b = c.lo or lo, c.hi or hi
            ax.fill_betweenx([y - 0.38, y + 0.38], a, b, color="#a5d6a7" if p["kind"] == "equivalent" else "#c8e6c9",
                             alpha=0.55, lw=0, zorder=0)
            for edge in (c.lo, c.hi):
                if edge:
                    ax.plot([edge, edge], [y - 0.42, y + 0.42], color="#1b5e20", ls="--", lw=1.3, zorder=1)
                    ax.annotate(f"{edge:g}", (edge, y + 0.42), ha="center", va="bottom", fontsize=7,
                                color="#1b5e20")
        color = VERDICT_COLORS.get(p.get("verdict"), "black")
        ci = p.get("ci")
        if ci and all(isinstance(v, (int, float)) and v > 0 for v in ci):
            drawn = [min(max(v, lo), hi) for v in ci]  # an unbounded end runs to the axis edge, without a cap
            ax.plot(drawn, [y, y], color=color, lw=2.6, solid_capstyle="butt", zorder=3)
            for end, shown in zip(ci, drawn, strict=True):
                if math.isfinite(end):
                    ax.plot([shown] * 2, [y - 0.12, y + 0.12], color=color, lw=2, zorder=3)
        ax.plot([p["estimate"]], [y], "D", color=color, ms=8, zorder=4, mec="white", mew=0.8)
        ax.annotate(f"{p['estimate']:.3f} {fmt.ci(ci)}  {p.get('verdict', '')}", (1.01, y),
                    xycoords=("axes fraction", "data"), va="center", fontsize=9, color=color)
    ax.axvline(1.0, color="#424242", lw=1, zorder=2)
    ax.set_yticks(range(n))
    ax.set_yticklabels([f"{p['id']}\n({p['kind']})" for p in reversed(preds)], fontsize=9)
    ax.set_ylim(-0.6, n - 0.3)
    ticks = _nice_ticks(lo, hi)
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{t:g}" for t in ticks])
    ax.xaxis.set_minor_formatter(plt.NullFormatter())
    ax.set_xlabel("ratio, treatment level / reference level (log scale; 1 = no effect)")
    ax.grid(axis="x", color="#e0e0e0", lw=0.6, zorder=-1)
    hyp = (record.get("hypothesis") or {}).get("name", "?")
    ax.set_title(f"backend: {record.get('backend', '?')}  |  {hyp}: {record.get('verdict', '?')}", fontsize=11,
                 loc="left")
    handles = [Line2D([], [], color="#555", marker="D", lw=2.6, label="estimate and interval used by the decision"),
               Patch(color="#a5d6a7", alpha=0.55, label="supported region (margin / beyond minimum effect)"),
               Line2D([], [], color="#1b5e20", ls="--", label="margin or threshold")]
    axes_h = ax.get_position().height * fig.get_figheight()
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.62 / axes_h), ncol=3, fontsize=8,
              frameon=False)
    return _png(fig)


def launch_means(record: dict[str, Any], rows: list[dict[str, Any]] | None) -> dict[str, tuple[list[float], int, int]]:
    """Per condition label: (launch means, failed launches, started launches without a usable request);
    from the record, else from the trials rows."""
    metric = ((record.get("conditions") or [{}])[0].get("metric") or {}).get("name") or "decode_tok_s"
    out: dict[str, tuple[list[float], int, int]] = {}
    computed: dict[str, list[float]] = {}
    if rows:
        per: dict[str, list[float]] = {}
        label_of: dict[str, str] = {}
        for r in Trials(rows).of_kind("request"):
            if (r.get("ok") and not r.get("warmup")
                    and isinstance(r.get(metric), (int, float))):
                per.setdefault(r["launch_id"], []).append(float(r[metric]))
                label_of[r["launch_id"]] = fmt.levels(r.get("levels") or {})
        for lid, vals in per.items():
            computed.setdefault(label_of[lid], []).append(sum(vals) / len(vals))
    for c in record.get("conditions") or []:
        label = fmt.levels(c.get("levels") or {})
        means = (c.get("metric") or {}).get("launch_means") or computed.get(label) or []
        launches = c.get("launches") or {}
        vals = [float(m) for m in means if isinstance(m, (int, float))]
        out[label] = (vals, int(launches.get("failed") or 0), max(0, int(launches.get("ok") or 0) - len(vals)))
    if not out:
        out = {k: (v, 0, 0) for k, v in computed.items()}
    return out


def launch_plot(record: dict[str, Any], rows: list[dict[str, Any]] | None) -> bytes | None:
    """A strip plot of every launch's mean per condition, with the condition mean as a bar."""
    data = launch_means(record, rows)
    if not any(v or f for v, f, _ in data.values()):
        return None
    metric = ((record.get("conditions") or [{}])[0].get("metric") or {}).get("name") or "metric"
    plt = _plt()
    labels = list(data)
    fig, ax = plt.subplots(figsize=(8.5, 0.8 + 0.6 * len(labels)))
    for i, label in enumerate(labels):
        y = len(labels) - 1 - i
        means, failed, no_data = data[label]
        extra = (f", {failed} failed" if failed else "") + (f", {no_data} without data" if no_data else "")
        if means:
            jitter = [((k * 0.618) % 1 - 0.5) * 0.3 for k in range(len(means))]  # deterministic spread
            ax.scatter(means, [y + j for j in jitter], s=28, color="#1565c0", alpha=0.8, zorder=3)
            m = sum(means) / len(means)
            ax.plot([m, m], [y - 0.3, y + 0.3], color="black", lw=2, zorder=4)
            ax.annotate(f"{m:.1f} (n={len(means)}{extra})", (1.01, y),
                        xycoords=("axes fraction", "data"), va="center", fontsize=9)
        else:
            ax.annotate(f"no launch served{' (' + extra[2:] + ')' if extra else ''}", (0.02, y),
                        xycoords=("axes fraction", "data"), va="center", fontsize=9, color=VERDICT_COLORS["refuted"])
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(list(reversed(labels)), fontsize=9)
    ax.set_ylim(-0.6, len(labels) - 0.4)
    ax.set_xlabel(f"{metric}: mean per launch (each dot is one launch; bar = mean over launches)")
    ax.grid(axis="x", color="#e0e0e0", lw=0.6)
    ax.set_title(f"backend: {record.get('backend', '?')}  |  launch means per condition", fontsize=11, loc="left")
    return _png(fig)


def looks_of(record: dict[str, Any]) -> list[dict[str, Any]]:
    a = record.get("analysis") or {}
    stopping = a.get("stopping") or {}
    seq = a.get("sequential") if isinstance(a.get("sequential"), dict) else {}
    return list(stopping.get("looks") or seq.get("looks") or [])


def trajectory_plot(record: dict[str, Any]) -> bytes | None:
    """Sequential runs: each prediction's estimate and interval at every look."""
    looks = looks_of(record)
    if not looks:
        return None
    crit = criteria(record)
    series: dict[str, list[tuple[float, float, list[float] | None]]] = {}
    for k, look in enumerate(looks, start=1):
        x = look.get("launches_per_condition") or look.get("launches") or look.get("look") or k
        preds = look.get("predictions") or []
        if isinstance(preds, dict):
            preds = [{"id": pid, **v} for pid, v in preds.items()]
        for p in preds:
            if isinstance(p.get("estimate"), (int, float)) and p["estimate"] > 0:
                series.setdefault(p["id"], []).append((float(x), float(p["estimate"]), p.get("ci")))
    if not series:
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, len(series), figsize=(3.6 * len(series) + 0.6, 3.2), squeeze=False)
    for ax, (pid, pts) in zip(axes[0], series.items(), strict=False):
        xs = [p[0] for p in pts]
        est = [p[1] for p in pts]
        c = crit.get(pid)
        # the view: estimates, thresholds and 1, widened to take intervals up to 2x beyond them; the
        # first looks' intervals (nominal levels like 1e-5 on 2 launches) can span many decades and
        # are drawn clipped, with an arrow at the clipped end
        core = [1.0, *est, *((e for e in (c.lo, c.hi) if e) if c else ())]
        floor, ceil = min(core) / 2, max(core) * 2
        vals = list(core)
        ax.plot(xs, est, "o-", color="#1565c0", zorder=3)
        for x, _, ci in pts:
            if ci and all(isinstance(v, (int, float)) and v > 0 for v in ci):
                lo, hi = max(min(ci), floor), min(max(ci), ceil)
                vals += [lo, hi]
                ax.plot([x, x], [lo, hi], color="#1565c0", lw=2, alpha=0.6)
                if min(ci) < floor:
                    ax.plot([x], [lo], marker="v", color="#1565c0", alpha=0.6)
                if max(ci) > ceil:
                    ax.plot([x], [hi], marker="^", color="#1565c0", alpha=0.6)
        for edge in (c.lo, c.hi) if c else ():
            if edge:
                ax.axhline(edge, color="#1b5e20", ls="--", lw=1.2)
        ax.axhline(1.0, color="#424242", lw=0.8)
        ax.set_yscale("log")
        ylo, yhi = min(vals) / 1.04, max(vals) * 1.04
        ax.set_ylim(ylo, yhi)
        ticks = _nice_ticks(ylo, yhi)
        ax.set_yticks(ticks)
        ax.set_yticklabels([f"{t:g}" for t in ticks])
        ax.yaxis.set_minor_formatter(plt.NullFormatter())
        ax.grid(axis="y", color="#e0e0e0", lw=0.6)
        ax.set_title(pid, fontsize=9)
        ax.set_xlabel("launches per condition")
    axes[0][0].set_ylabel("ratio (log)")
    fig.suptitle(f"backend: {record.get('backend', '?')}  |  sequential looks", fontsize=11, x=0.01, y=1.04, ha="left")
    return _png(fig)


# --------------------------------------------------------------------------- document (pure)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "x"


def record_blocks(record: dict[str, Any], rows: list[dict[str, Any]] | None, prefix: str,
                  heading_level: int = 1) -> list[Block]:
    """The section of one verdict record: backend banner, predictions, figures, conditions, provenance."""
    hyp = record.get("hypothesis") or {}
    backend = record.get("backend", "?")
    note = ("simulated backend: these numbers come from the performance model, not from hardware"
            if backend == "sim" else "")
    blocks: list[Block] = [
        Heading(heading_level, f"{hyp.get('name', '?')}: {record.get('verdict', '?')}"),
        Banner(f"backend: {backend}", note),
        Banner(f"population: {fmt.population(record)}",
               "the machines the launches ran on: an interval covers launches on these machines only"),
    ]
    if hyp.get("statement"):
        blocks.append(Para(f"Statement: {hyp['statement']}"))
    blocks.append(Para(f"Finished {record.get('finished', '?')}; record {str(record.get('hash'))[:16]}; "
                       f"registration {str(record.get('registration'))[:16]}; "
                       f"trials {(record.get('trials') or {}).get('path', '?')} "
                       f"(sha256 {str((record.get('trials') or {}).get('sha256'))[:16]})."))
    crit = criteria(record)
    blocks.append(Heading(heading_level + 1, "Predictions"))
    columns = ["prediction", "kind", "verdict", "estimate", "interval", "covers", "p", "criterion", "reason"]
    blocks.append(Table(columns, [
        [str(p.get("id")), str(p.get("kind")), " — ".join([str(p.get("verdict")), *(p.get("marks") or [])]),
         fmt.num(p.get("estimate")), fmt.ci(p.get("ci")), fmt.covers(p),
         fmt.p_value(p.get("p_value")), crit[p["id"]].text if p.get("id") in crit else "-", str(p.get("reason", ""))]
        for p in record.get("predictions") or []]))
    nxt = [(p, text) for p in record.get("predictions") or [] if (text := fmt.next_machine(p))]
    if nxt:
        blocks.append(Table(["prediction", "the next machine (beside the interval for these machines' mean)"],
                            [[str(p.get("id")), text] for p, text in nxt]))
    forest = forest_plot(record)
    if forest:
        blocks.append(Figure(f"{prefix}forest", forest,
                             "Forest plot: each prediction's ratio (diamond) and the interval its decision used, "
                             "against its margin or threshold (dashed; shaded where the prediction holds)."))
    blocks.append(Heading(heading_level + 1, "Conditions"))
    blocks.append(Table(["condition", "launches ok", "failed", "mean", "server args"], [
        [fmt.levels(c.get("levels") or {}), str((c.get("launches") or {}).get("ok", "-")),
         str((c.get("launches") or {}).get("failed", "-")), fmt.num((c.get("metric") or {}).get("mean"), 2),
         " ".join(c.get("server_args") or [])]
        for c in record.get("conditions") or []]))
    failures = [(c, f) for c in record.get("conditions") or [] for f in c.get("failures") or []]
    failures += [(c, f"lost {lost}") for c in record.get("conditions") or []
                 if (lost := fmt.requests_lost(c.get("losses")))]
    if failures:
        blocks.append(Pre("\n".join(f"{fmt.levels(c.get('levels') or {})}: {f}" for c, f in failures)))
    ext = (record.get("analysis") or {}).get("extension")
    if ext:
        blocks.append(Para(f"Extension: {ext.get('note')} (design changed: {ext.get('changed')})"))
    launches = launch_plot(record, rows)
    if launches:
        blocks.append(Figure(f"{prefix}launches", launches, "Per-condition launch means (the unit of replication)."))
    traj = trajectory_plot(record)
    if traj:
        stopping = (record.get("analysis") or {}).get("stopping") or {}
        blocks.append(Heading(heading_level + 1, "Sequential looks"))
        if stopping.get("reason"):
            blocks.append(Para(f"Stopped: {stopping['reason']}"))
        blocks.append(Figure(f"{prefix}looks", traj, "Estimate and interval at each look."))
    env = {k: v for k, v in environment_summary(record).items() if v and k != "server_args"}
    if env:
        blocks.append(Heading(heading_level + 1, "Environment"))
        blocks.append(Table(["field", "value"], [[k, str(v)] for k, v in env.items()]))
    return blocks


def sweep_blocks(summary: dict[str, Any]) -> list[Block]:
    jobs = summary.get("jobs") if isinstance(summary, dict) else None
    blocks: list[Block] = [Heading(2, "Sweep summary")]
    if not isinstance(jobs, list):
        return blocks + [Pre(json.dumps(summary, indent=2))]
    m = summary.get("multiplicity") or {}
    if m:
        blocks.append(Para(f"Multiplicity: {m.get('description', m.get('method'))} at alpha = {m.get('alpha')} "
                           f"over {m.get('family_size')} predictions."))
    rows = []
    for r in jobs:
        preds = r.get("predictions") or []
        lines = [fmt.prediction_line(p) for p in preds]
        rows.append([str(r.get("job")), str(r.get("status")), str(r.get("hypothesis") or "-"),
                     str(r.get("backend") or "-"), str(r.get("verdict") or "-"),
                     " ".join(r.get("overrides") or []), "\n".join(lines) or str(r.get("error") or "")])
    return blocks + [Table(["job", "status", "hypothesis", "backend", "verdict", "overrides", "predictions"], rows)]


# --------------------------------------------------------------------------- rendering (pure)

_CSS = (
    "\n"
    "body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1100px;margin:2em auto;"
    "padding:0 1em;color:#212121}\n"
    "table{border-collapse:collapse;margin:.8em 0;font-size:.9em}"
    "th,td{border:1px solid #ddd;padding:.3em .6em;vertical-align:top;text-align:left}\n"
    "th{background:#f5f5f5}"
    ".banner{font-size:1.4em;font-weight:700;padding:.4em .8em;background:#fff3e0;border-left:6px solid #ef6c00;"
    "margin:.6em 0}\n"
    ".banner small{display:block;font-size:.6em;font-weight:400}.supported{color:#2e7d32;font-weight:600}"
    ".refuted{color:#c62828;font-weight:600}\n"
    ".inconclusive{color:#757575;font-weight:600}figure{margin:1em 0}figcaption{font-size:.85em;color:#555}"
    "img{max-width:100%}\n"
    "pre{background:#f5f5f5;padding:.6em;overflow-x:auto}\n"
)


def _cell_html(text: str) -> str:
    esc = html.escape(text).replace("\n", "<br>")
    return f'<span class="{text}">{esc}</span>' if text in VERDICT_COLORS else esc


def render_html(title: str, blocks: Iterable[Block]) -> str:
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>"]
    for b in blocks:
        if isinstance(b, Heading):
            out.append(f"<h{b.level}>{html.escape(b.text)}</h{b.level}>")
        elif isinstance(b, Banner):
            small = f"<small>{html.escape(b.note)}</small>" if b.note else ""
            out.append(f'<div class="banner">{html.escape(b.text)}{small}</div>')
        elif isinstance(b, Para):
            out.append(f"<p>{html.escape(b.text)}</p>")
        elif isinstance(b, Table):
            out.append("<table><thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in b.headers)
                       + "</tr></thead><tbody>")
            out += ["<tr>" + "".join(f"<td>{_cell_html(c)}</td>" for c in row) + "</tr>" for row in b.rows]
            out.append("</tbody></table>")
        elif isinstance(b, Figure):
            data = base64.b64encode(b.png).decode("ascii")
            out.append(f'<figure><img alt="{html.escape(b.name)}" src="data:image/png;base64,{data}">'
                       f"<figcaption>{html.escape(b.caption)}</figcaption></figure>")
        elif isinstance(b, Pre):
            out.append(f"<pre>{html.escape(b.text)}</pre>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def render_markdown(blocks: Iterable[Block], fig_dir: str = FIG_DIR) -> str:
    """The blocks as Markdown. Every block's text is plain text (names, statements, flags, error messages a user
    or a server wrote): escaped (`fmt.md_text`), so it reads as itself and adds no link, image, tag or block."""
    md = fmt.md_text
    out: list[str] = []
    for b in blocks:
        if isinstance(b, Heading):
            out += ["#" * b.level + " " + md(b.text), ""]
        elif isinstance(b, Banner):
            out += [f"**{md(b.text)}**" + (f" ({md(b.note)})" if b.note else ""), ""]
        elif isinstance(b, Para):
            out += [md(b.text), ""]
        elif isinstance(b, Table):
            out.append("| " + " | ".join(fmt.md_cell(h) for h in b.headers) + " |")
            out.append("|" + "---|" * len(b.headers))
            out += ["| " + " | ".join(fmt.md_cell(c) for c in row) + " |" for row in b.rows]
            out.append("")
        elif isinstance(b, Figure):
            out += [f"![{md(b.caption)}]({fig_dir}/{b.name}.png)", "", f"*{md(b.caption)}*", ""]
        elif isinstance(b, Pre):
            fence = "`" * max(3, 1 + max((len(r) for r in re.findall(r"`+", b.text)), default=0))
            out += [fence, b.text, fence, ""]
    return "\n".join(out)


# --------------------------------------------------------------------------- the shell


def _read_rows(path: Path | None) -> list[dict[str, Any]] | None:
    if path is None or not path.is_file():
        return None
    try:
        return read_trials(path)
    except TrialsFileError:
        return None


def _job_key(p: Path) -> tuple[int, Any]:
    name = p.parent.name
    return (0, int(name)) if name.isdigit() else (1, name)


def build(path: Path) -> tuple[str, list[Block], Path, str]:
    """(title, blocks, output directory, output stem) for a run dir, a multirun dir or a ledger."""
    if path.is_file():
        blocks: list[Block] = [Heading(1, f"Ledger report: {path.name}")]
        records = list(ledger.read_kind(path, "verdict"))
        if not records:
            raise ReportError(f"{path}: no verdict records in this ledger")
        backends = sorted({str(r.get("backend")) for r in records})
        blocks.append(Banner(f"backend: {', '.join(backends)}"))
        blocks.append(Table(["#", "finished", "hypothesis", "backend", "verdict", "record"], [
            [str(i), str(r.get("finished")), str((r.get("hypothesis") or {}).get("name")), str(r.get("backend")),
             str(r.get("verdict")), str(r.get("hash"))[:12]] for i, r in enumerate(records, start=1)]))
        for i, rec in enumerate(records, start=1):
            trials = (rec.get("trials") or {}).get("path")
            rows = _read_rows(resolve_trials(path, trials)) if trials else None
            blocks += record_blocks(rec, rows, f"r{i}-", heading_level=2)
        return f"Ledger report: {path.name}", blocks, path.parent, f"{path.stem}.report"
    if not path.is_dir():
        raise ReportError(f"{path}: no such run directory, multirun directory or ledger")
    verdict = path / "verdict.json"
    if verdict.is_file():
        rec = read_json_object(verdict)
        if rec is None:
            raise ReportError(f"{verdict}: not a verdict record")
        name = (rec.get("hypothesis") or {}).get("name", "?")
        return f"Report: {name}", record_blocks(rec, _read_rows(path / "trials.jsonl"), ""), path, "report"
    jobs = sorted(path.glob("*/verdict.json"), key=_job_key)
    summary = read_json_object(path / "sweep_summary.json")
    if not jobs and summary is None:
        raise ReportError(f"{path}: neither a run directory (verdict.json) nor a multirun directory "
                          "(job directories with verdict.json, or sweep_summary.json)")
    recs = [(j.parent.name, read_json_object(j)) for j in jobs]
    backends = sorted({str(r.get("backend")) for _, r in recs if r})
    blocks = [Heading(1, f"Multirun report: {path.name}"), Banner(f"backend: {', '.join(backends) or '?'}")]
    if summary is not None:
        blocks += sweep_blocks(summary)
    for job, rec in recs:
        if rec is None:
            blocks += [Heading(2, f"job {job}"), Para("verdict.json is unreadable")]
            continue
        blocks += [Heading(2, f"job {job}")]
        blocks += record_blocks(rec, _read_rows(path / job / "trials.jsonl"), f"job{_slug(job)}-", heading_level=3)
    return f"Multirun report: {path.name}", blocks, path, "report"


def write_report(path: str | Path) -> list[Path]:
    """Write `<stem>.md`, `<stem>.html` (self-contained) and the Markdown's PNG figures; return their paths."""
    return write_pages(*build(Path(path)))


def write_pages(title: str, blocks: list[Any], out_dir: Path, stem: str) -> list[Path]:
    """A report's blocks as `<stem>.md`, `<stem>.html` (self-contained) and the Markdown's PNG figures (a run's
    report and a search's both)."""
    figures = [b for b in blocks if isinstance(b, Figure)]
    fig_dir = f"{stem}_figures" if stem != "report" else FIG_DIR
    written: list[Path] = []
    if figures:
        (out_dir / fig_dir).mkdir(exist_ok=True)
        for f in figures:
            p = out_dir / fig_dir / f"{f.name}.png"
            p.write_bytes(f.png)
            written.append(p)
    md = out_dir / f"{stem}.md"
    md.write_text(render_markdown(blocks, fig_dir), encoding="utf-8")
    page = out_dir / f"{stem}.html"
    page.write_text(render_html(title, blocks), encoding="utf-8")
    return [md, page, *written]


def summary_markdown(record: dict[str, Any]) -> str:
    """summary.md: the verdict table. What the record embeds from users and servers (names, the statement, ids,
    levels, reasons, notes, the trials path) is escaped (`fmt.md_text`, `fmt.md_cell`, `fmt.md_code`)."""
    h, md, cell = record["hypothesis"], fmt.md_text, fmt.md_cell
    lines = [
        f"# {md(h['name'])}: {md(record['verdict'])}",
        "",
        f"backend: {md(record['backend'])}",
        "",
        f"population: {md(fmt.population(record))}",
        "",
        f"> {md(h['statement'])}",
        "",
        "| prediction | kind | estimate | interval | p | covers | verdict | reason |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for p in record["predictions"]:
        est = f"{p['estimate']:.3f}" if p.get("estimate") is not None else "-"
        ci = f"[{p['ci'][0]:.3f}, {p['ci'][1]:.3f}]" if p.get("ci") else "-"
        pv = f"{p['p_value']:.2g}" if p.get("p_value") is not None else "-"
        verdict = " — ".join([p["verdict"], *(p.get("marks") or [])])
        lines.append(f"| {cell(p['id'])} | {cell(p['kind'])} | {est} | {cell(ci)} | {pv} | {cell(fmt.covers(p))} | "
                     f"{cell(verdict)} | {cell(p['reason'])} |")
    nxt = [(p, text) for p in record["predictions"] if (text := fmt.next_machine(p))]
    if nxt:
        lines += ["", "| prediction | the next machine (beside the interval for these machines' mean) |", "|---|---|"]
        lines += [f"| {cell(p['id'])} | {cell(text)} |" for p, text in nxt]
    lines += ["", "| condition | launches ok/failed | mean | requests lost |", "|---|---|---|---|"]
    for c in record["conditions"]:
        levels = ", ".join(f"{k}={v}" for k, v in c["levels"].items())
        mean = c["metric"].get("mean")
        mean_s = f"{mean:.4g} {c['metric'].get('name', '')}" if mean is not None else "-"
        lost = fmt.requests_lost(c.get("losses")) or "-"
        lines.append(f"| {cell(levels)} | {c['launches']['ok']}/{cell(fmt.failed_launches(c))} | {cell(mean_s)} | "
                     f"{cell(lost)} |")
    stopping = record.get("analysis", {}).get("stopping", {})
    if stopping:
        lines += ["", f"stopping: {md(stopping.get('reason'))}"]
    ext = record.get("analysis", {}).get("extension")
    if ext:
        lines += ["", f"**extension:** {md(ext.get('note'))} (design changed: {md(ext.get('changed'))})"]
    lines += ["", f"trials: {fmt.md_code(record['trials']['path'])} (sha256 {md(record['trials']['sha256'][:16])}...)",
              ""]
    return "\n".join(lines)
