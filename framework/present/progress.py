"""Live progress and the closing verdict table, with rich.

On a terminal the user sees a bar over launches with the condition and launch running and the
time left; elsewhere (CI, logs) one plain line per launch. Shown figures always name the backend.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from framework.core.design import Condition
from framework.present import format as fmt
from framework.stats.variance import optimal_requests

VERDICT_STYLE = {"supported": "green", "refuted": "red", "inconclusive": "yellow"}


def make_console(stderr: bool = False) -> Console:
    """The terminal's width on a terminal; 120 columns in logs and CI, where rich would pick 80."""
    import sys

    stream = sys.stderr if stderr else sys.stdout
    return Console(width=None if stream.isatty() else 120, stderr=stderr)


class RunProgress:
    def __init__(self, console: Console, name: str, total_launches: int, requests_per_launch: int,
                 enabled: bool = True) -> None:
        self.console = console
        self.name = name
        self.enabled = enabled
        self.requests_per_launch = requests_per_launch
        self.progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[detail]}"), TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn(),
            console=console, transient=False, disable=not enabled,
        )
        self.task = self.progress.add_task(name, total=total_launches, detail="")
        self._label = ""
        self._requests = 0

    def __enter__(self) -> "RunProgress":
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(*exc)  # type: ignore[arg-type]

    def launch_started(self, cond: Condition, replicate: int, of: int) -> None:
        self._label = escape(f"{cond.label()} · launch {replicate + 1}/{of}")
        self._requests = 0
        self.progress.update(self.task, detail=f"{self._label} · starting")
        if not self.enabled:
            self.console.print(f"{self.name}: {self._label}", highlight=False)

    def request_done(self, warmup: bool) -> None:
        self._requests += 1
        kind = "warm-up" if warmup else "request"
        self.progress.update(self.task, detail=f"{self._label} · {kind} {self._requests}/{self.requests_per_launch}")

    def launch_done(self) -> None:
        self.progress.advance(self.task)

    def launch_failed(self, cond: Condition, message: str) -> None:
        self.console.print(f"[yellow]{escape(cond.label())}: launch failed: {escape(message)}[/yellow]",
                           highlight=False)

    def launch_reused(self, cond: Condition) -> None:
        self.progress.advance(self.task)
        if not self.enabled:
            self.console.print(escape(f"{self.name}: {cond.label()} · reused from the interrupted run"),
                               highlight=False)

    def note(self, text: str) -> None:
        self.console.print(escape(text), highlight=False)

    def finish_early(self) -> None:
        task = self.progress.tasks[0]
        self.progress.update(self.task, total=task.completed)


def print_verdict_table(console: Console, record: dict[str, Any]) -> None:
    """Predictions with estimate, interval and verdict; then each reason on a line of its own."""
    h = record["hypothesis"]
    verdict = record["verdict"]
    style = VERDICT_STYLE[verdict]
    metric = next((c["metric"].get("name") for c in record["conditions"] if c.get("metric")), "")
    name = escape(h["name"])
    conds = Table(title=f"{name} — conditions (backend: {record['backend']})", title_justify="left")
    for col in ("condition", "launches ok", "failed", f"mean {metric}"):
        conds.add_column(col, no_wrap=col != "condition")
    for c in record["conditions"]:
        mean = c["metric"].get("mean")
        no_data = c["launches"].get("without_data", 0)
        failed = fmt.failed_launches(c) + (f" (+{no_data} served nothing)" if no_data else "")
        conds.add_row(escape(", ".join(f"{k}={v}" for k, v in c["levels"].items())), str(c["launches"]["ok"]),
                      failed, fmt.sig(mean))
    console.print(conds)
    for c in record["conditions"]:
        for failure in c.get("failures") or []:  # "<class>: <the log line that shows it>"
            console.print(escape(f"  {', '.join(f'{k}={v}' for k, v in c['levels'].items())} failed: {failure}"),
                          highlight=False)
        lost = fmt.requests_lost(c.get("losses"))
        if lost:
            console.print(escape(f"  {', '.join(f'{k}={v}' for k, v in c['levels'].items())} lost {lost}"),
                          highlight=False)
    ext = (record.get("analysis") or {}).get("extension")
    mark = "" if not ext else (" — extended run (anytime-valid)" if ext.get("registered")
                               else " — [bold yellow]UNREGISTERED EXTENSION[/bold yellow]")
    table = Table(title=f"{name} — backend: {record['backend']} — [{style}]{verdict}[/{style}]{mark}",
                  title_justify="left")
    for col in ("prediction", "kind", "estimate", "interval", "p", "covers", "verdict"):
        table.add_column(col, no_wrap=col != "prediction", overflow="fold")
    for p in record["predictions"]:
        ci = fmt.ci(p.get("ci"))
        pstyle = VERDICT_STYLE[p["verdict"]]
        marks = "".join(f"\n[bold red]{escape(m)}[/bold red]" for m in p.get("marks") or [])
        table.add_row(escape(p["id"]), p["kind"], fmt.num(p.get("estimate")), escape(ci), fmt.p_value(p.get("p_value")),
                      escape(fmt.covers(p)), f"[{pstyle}]{p['verdict']}[/{pstyle}]{marks}")
    console.print(table)
    if fmt.population(record) != fmt.MISSING:
        console.print(escape(f"  population: {fmt.population(record)}"), highlight=False)
    for p in record["predictions"]:
        console.print(escape(f"  {p['id']}: {p['reason']}"), highlight=False)
    for p in record["predictions"]:
        if nxt := fmt.next_machine(p):
            console.print(escape(f"  {p['id']}, the next machine: {nxt}"), highlight=False)
    if ext:
        console.print(f"[yellow]{escape(str(ext.get('note')))}[/yellow]", highlight=False)


def print_noise(console: Console, record: dict[str, Any]) -> None:
    """Launch-level noise per condition and the cost-optimal requests per launch (two-stage sampling)."""
    var = (record.get("analysis", {}).get("details") or {}).get("variance") or {}
    by_condition = var.get("by_condition") or {}
    c_launch, c_request = var.get("launch_cost_s"), var.get("request_cost_s")
    if not by_condition or not c_launch or not c_request:
        return
    table = Table(title=f"launch-level noise (log scale); launch {c_launch:.1f} s, request {c_request:.1f} s",
                  title_justify="left")
    for col in ("condition", "sd between launches", "sd within", "ICC", "design effect", "requests/launch m*"):
        table.add_column(col, no_wrap=col != "condition")
    for index, cond in enumerate(record["conditions"]):  # recorded in condition-index order
        comp = by_condition.get(str(index))
        if not comp or comp.get("var_within") is None or comp.get("var_between") is None:
            continue
        m_star = optimal_requests(comp["var_between"], comp["var_within"], c_launch, c_request)
        m_text = "more (no launch noise seen)" if m_star == float("inf") else str(max(1, int(-(-m_star // 1))))
        table.add_row(escape(", ".join(f"{k}={v}" for k, v in cond["levels"].items())), f"{comp['sd_between']:.2%}",
                      f"{comp['sd_within']:.2%}", f"{comp['icc']:.2f}", f"{comp['design_effect']:.2f}", m_text)
    console.print(table)
    console.print("  m* = sqrt((c_launch / c_request) * (s_within^2 / s_between^2)): more requests per launch pay "
                  "only while within-launch noise dominates (docs/statistics.md)", highlight=False)
