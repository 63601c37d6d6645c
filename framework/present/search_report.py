"""The report page of a search directory: what was explored (the front plotted, with each candidate's interval),
what it cost against the grid, the naive and selection-corrected estimates of the winner, and the confirmatory
verdict on fresh launches (its own section, as `report` draws any run).

Built as blocks of :mod:`framework.present.report` from search.json and the confirmation's verdict.json;
only `write_search_report` does I/O.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from framework.errors import ReportError
from framework.present import format as fmt
from framework.present.report import (
    Banner,
    Block,
    Figure,
    Heading,
    Para,
    Pre,
    Table,
    _plt,
    _png,
    _read_rows,
    record_blocks,
    write_pages,
)
from framework.records.trials import read_json_object


def _points(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Each measured candidate with its estimates per objective: [{name, estimates: [..], front: bool, ...}]."""
    front = summary.get("front") or {}
    out = []
    for p in front.get("points") or []:
        if "estimates" in p:  # two objectives (framework.stats.pareto.Front)
            out.append({"name": p["name"], "estimates": p["estimates"], "front": bool(p.get("on_naive_front")),
                        "dominated": bool(p.get("dominated_with_confidence"))})
        else:
            out.append({"name": p["name"], "estimates": [p["estimate"]], "dominated": False,
                        "front": p["name"] in (front.get("best") or []), "feasible": p.get("feasible")})
    return out


def front_plot(summary: dict[str, Any]) -> bytes | None:
    """Two objectives: every candidate with its intervals, the front joined; one: candidates ranked with intervals."""
    points = _points(summary)
    if not points:
        return None
    plt = _plt()
    chosen = {", ".join(f"{k}={v}" for k, v in c["point"].items()) for c in summary.get("chosen") or []}
    objectives = (summary.get("front") or {}).get("objectives") or []
    if len(objectives) == 2:
        fig, ax = plt.subplots(figsize=(6.4, 4.4))
        for p in points:
            (ex, ey) = (p["estimates"][0], p["estimates"][1])
            xerr = _err(ex)
            yerr = _err(ey)
            color = "#c62828" if p["name"] in chosen else ("#1565c0" if p["front"] else "#9e9e9e")
            ax.errorbar([ex["estimate"]], [ey["estimate"]], xerr=xerr, yerr=yerr, fmt="o", color=color, capsize=3,
                        alpha=0.5 if p["dominated"] else 1.0)
        on = sorted((p for p in points if p["front"]), key=lambda p: p["estimates"][0]["estimate"])
        if len(on) > 1:
            ax.plot([p["estimates"][0]["estimate"] for p in on], [p["estimates"][1]["estimate"] for p in on],
                    "-", color="#1565c0", lw=1)
        ax.set_xlabel(f"{objectives[0]['metric']} ({objectives[0]['direction']})")
        ax.set_ylabel(f"{objectives[1]['metric']} ({objectives[1]['direction']})")
        ax.set_title("Pareto front (blue), chosen (red), dominated with confidence (faded)")
    else:
        pts = sorted(points, key=lambda p: p["estimates"][0]["estimate"])
        fig, ax = plt.subplots(figsize=(6.8, 0.35 * len(pts) + 1.4))
        for i, p in enumerate(pts):
            e = p["estimates"][0]
            color = "#c62828" if p["name"] in chosen else ("#9e9e9e" if p.get("feasible") is False else "#1565c0")
            ax.errorbar([e["estimate"]], [i], xerr=_err(e), fmt="o", color=color, capsize=3)
        ax.set_yticks(range(len(pts)))
        ax.set_yticklabels([p["name"] for p in pts], fontsize=7)
        metric = objectives[0]["metric"] if objectives else "metric"
        ax.set_xlabel(f"{metric}: geometric mean over launches, 90% interval")
        ax.set_title("Explored candidates (chosen in red, failing a constraint in grey)")
    return _png(fig)


def _err(e: dict[str, Any]) -> list[list[float]] | None:
    ci = e.get("ci")
    if not ci or any(v is None or not math.isfinite(v) for v in ci):
        return None
    return [[max(e["estimate"] - ci[0], 0.0)], [max(ci[1] - e["estimate"], 0.0)]]


def search_blocks(summary: dict[str, Any], confirmation: dict[str, Any] | None,
                  rows: list[dict[str, Any]] | None) -> list[Block]:
    backend = summary.get("backend", "?")
    blocks: list[Block] = [
        Heading(1, f"Search {summary.get('id')}: {summary.get('hypothesis')}"),
        Banner(f"backend: {backend}", "simulated backend: these numbers come from the performance model"
               if backend == "sim" else ""),
        Para(f"Exploratory: {summary.get('launches_spent')} launches spent on {summary.get('candidates_launched')} "
             f"candidates ({summary.get('launches_per_candidate')} launches each, then racing); an exhaustive grid of "
             f"the {summary.get('grid_points')} points at the same launches per point would have cost "
             f"{summary.get('grid_launches')}. {summary.get('avoided_suggestions')} suggestion(s) predicted to crash "
             f"were not launched. Stopped: {summary.get('stop_reason')}."),
    ]
    fig = front_plot(summary)
    if fig:
        blocks.append(Figure("search-front", fig, "What the search explored: each candidate's geometric mean over "
                                                   "its launches with its interval."))
    chosen = summary.get("chosen") or []
    blocks.append(Table(["chosen", "mean", "launches"], [
        [fmt.levels(c["point"]), fmt.num(c.get("mean"), 4), str(c.get("launches"))] for c in chosen]))
    est = summary.get("estimate")
    if est:
        blocks.append(Heading(2, "The winner against the reference, from the exploration"))
        blocks.append(Table(["estimate", "ratio", "interval"], [
            ["naive (ignores the selection)", fmt.num(est.get("naive"), 4), fmt.ci(est.get("naive_ci"))],
            ["selection-corrected (conditional, AKM)", fmt.num(est.get("corrected"), 4),
             fmt.ci(est.get("corrected_ci"))]]))
    if summary.get("capacity"):
        blocks.append(Heading(2, "SLO capacity"))
        blocks.append(Pre("\n".join(fmt.capacity_line(c) for c in summary["capacity"])))
    blocks.append(Heading(2, "Candidates"))
    blocks.append(Table(["candidate", "launches", "failed", "mean", "feasible"], [
        [fmt.levels(c["point"]), str(len(c.get("launch_ids") or [])), str(c.get("failed")),
         fmt.num(((c.get("metrics") or {}).get((summary.get("goal") or {}).get("metric")) or {}).get("mean"), 4),
         str(c.get("feasible"))] for c in summary.get("candidates") or []]))
    if confirmation is not None:
        blocks.append(Heading(2, "Confirmation on fresh launches"))
        blocks += record_blocks(confirmation, rows, "confirm-", heading_level=2)
    else:
        blocks.append(Para("No confirmatory verdict in this directory (confirm/verdict.json)."))
    return blocks


def build_search(path: Path) -> tuple[str, list[Block], Path, str]:
    summary = read_json_object(path / "search.json")
    if summary is None:
        raise ReportError(f"{path / 'search.json'}: not a search summary")
    verdict = path / "confirm" / "verdict.json"
    confirmation = read_json_object(verdict) if verdict.is_file() else None
    rows = _read_rows(path / "confirm" / "trials.jsonl")
    return f"Search: {summary.get('hypothesis')}", search_blocks(summary, confirmation, rows), path, "report"


def write_search_report(path: str | Path) -> list[Path]:
    """report.md, report.html (self-contained) and the Markdown's figures in the search directory."""
    return write_pages(*build_search(Path(path)))
