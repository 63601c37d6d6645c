"""`python -m framework audit [ledger=PATH]` and `audit history hypothesis=NAME`: the audit as tables.

The checks themselves are :mod:`framework.records.audit` (no printing); this is their face.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from framework.cli.args import kv_pairs
from framework.errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_PROBLEMS, ConfigError
from framework.present.progress import VERDICT_STYLE, make_console
from framework.records import audit
from framework.records.ledger import DEFAULT_LEDGER


def main(args: list[str]) -> int:
    if args and args[0] == "history":
        kv = kv_pairs(args[1:])
        if "hypothesis" not in kv:
            raise ConfigError("command line", "hypothesis", "audit history needs hypothesis=NAME")
        return cmd_history(kv.get("ledger", DEFAULT_LEDGER), kv["hypothesis"])
    kv = kv_pairs(args)
    if "expect_head" in kv and not kv["expect_head"].strip():  # given but empty: never skip the check silently
        raise ConfigError("command line", "expect_head", "empty; give a record hash (at least 12 hex digits) or a "
                                                         "head file, or leave expect_head out")
    anchor = audit.read_anchor(kv["expect_head"]) if "expect_head" in kv else None
    return cmd_audit(kv.get("ledger", DEFAULT_LEDGER), anchor)


def _console(stderr: bool = False) -> Any:
    return make_console(stderr)


def _style(verdict: str) -> str:
    return VERDICT_STYLE.get(verdict, "white")


def _v(verdict: str | None) -> str:
    return f"[{_style(verdict)}]{verdict}[/]" if verdict else ""


def cmd_audit(ledger: str = "verdicts.jsonl", expect_head: tuple[str, int | None] | None = None) -> int:
    """Print the audit as tables. 0: everything holds; 1: problems; 2: bad input (no such ledger)."""
    console, errors = _console(), _console(stderr=True)
    if Path(ledger).is_dir():
        errors.print(f"[red]error:[/] {escape(ledger)} is a directory, not a ledger (pass ledger=PATH)")
        return EXIT_BAD_INPUT
    try:
        report = audit.audit(ledger, expect_head)
    except FileNotFoundError:
        errors.print(f"[red]error:[/] ledger {escape(ledger)!s} not found (pass ledger=PATH)")
        return EXIT_BAD_INPUT
    except OSError as exc:
        errors.print(f"[red]error:[/] cannot read ledger {escape(ledger)}: {escape(str(exc))}")
        return EXIT_BAD_INPUT
    table = Table(title=f"Ledger {escape(report.ledger)}: {len(report.records)} records")
    for col in ("line", "hash", "kind", "hypothesis", "verdict", "backend", "rules", "when", "status"):
        table.add_column(col, overflow="fold")
    for r in report.records:
        status = "[green]ok[/]" if r.problems == 0 else f"[red]{r.problems} problem(s)[/]"
        if r.note:
            status += " [yellow](exploratory)[/]" if r.kind == "exploration" else " [yellow](extension)[/]"
        table.add_row(str(r.line), (r.hash or "")[:12], r.kind or "?", escape(r.hypothesis or ""), _v(r.verdict),
                      r.backend or "", f"v{r.rules_version}" if r.rules_version else "", r.when or "", status)
    console.print(table)
    for r in report.records:
        if r.note:
            console.print(f"[yellow]line {r.line}: {escape(r.note)}[/]", highlight=False, soft_wrap=True)
    for r in report.records:  # recomputed above under each record's own rules; this is what today's say
        if r.today:
            console.print(f"line {r.line} (rules v{r.rules_version}): {escape(r.today)}", highlight=False,
                          soft_wrap=True)
    count, last = report.head
    console.print(f"head: {count} lines, last hash {last or '-'} (note it elsewhere to detect a rewritten tail)")
    if report.ok:
        console.print("[green]audit passed:[/] chain intact, trials files unchanged, "
                      "every verdict recomputed under the rules it was made with, and its backend, host and "
                      "GPUs as its trials say" + (f"; the noted head {escape(expect_head[0][:12])} is in it"
                                                  if expect_head else ""))
        return EXIT_OK
    problems = Table(title=f"{len(report.problems)} problem(s)", title_style="bold red")
    for col in ("record", "check", "problem"):
        problems.add_column(col, overflow="fold")
    for p in report.problems:
        problems.add_row(escape(p.where()), p.kind, escape(p.message))
    errors.print(problems)
    errors.print("[red]audit failed[/]")
    return EXIT_PROBLEMS


def cmd_history(ledger: str, name: str) -> int:
    """Print a hypothesis's verdicts over time. 0: printed; 2: no such ledger or hypothesis."""
    console, errors = _console(), _console(stderr=True)
    if not Path(ledger).is_file():
        errors.print(f"[red]error:[/] ledger {escape(ledger)} not found (pass ledger=PATH)")
        return EXIT_BAD_INPUT
    rows = audit.history(ledger, name)
    if not rows:
        errors.print(f"[red]error:[/] no records for hypothesis {escape(name)!s} in {escape(ledger)}")
        return EXIT_BAD_INPUT
    table = Table(title=f"History of {escape(name)} in {escape(ledger)}")
    for col in ("line", "hash", "when", "record", "verdict", "predictions", "what changed"):
        table.add_column(col, overflow="fold")
    for r in rows:
        preds = ", ".join(f"{pid}: {_v(v)}" for pid, v in r.predictions.items())
        changed = "; ".join(f"{k}: {escape(str(a))} -> {escape(str(b))}" for k, (a, b) in r.changed.items())
        what = escape(r.note) if r.note else changed
        verdict = _v(r.verdict) + (f" [bold red]FLIP[/] ({', '.join(r.flipped)})" if r.flip else "")
        if r.backend:
            verdict += f" ({r.backend})"
        table.add_row(str(r.line), r.hash[:12], r.when or "", r.kind, verdict, preds, what)
    console.print(table)
    flips = sum(1 for r in rows if r.flip)
    amendments = sum(1 for r in rows if r.kind == "amendment")
    console.print(f"{sum(1 for r in rows if r.kind == 'verdict')} verdict(s), {flips} flip(s), "
                  f"{amendments} amendment(s)")
    return EXIT_OK
