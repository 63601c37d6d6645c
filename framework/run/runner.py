"""The imperative shell of `python -m framework run`: launch, measure, write, analyse, record.

Order of work for one run:

1. resolve the config into a hypothesis, an experiment, a backend and an effective design
   (all checked before any server starts: :mod:`framework.run.resolve`);
2. register the hypothesis in the ledger (or refuse if it changed since registration);
3. launch every planned (condition, replicate) in randomized blocks through the session, writing each launch
   outcome and each request to `trials.jsonl` the moment it happens (:mod:`framework.run.session`, the
   design's policy :class:`framework.run.measure.Blocks`);
4. analyse the trials (pure), append one verdict record to the ledger (:mod:`framework.run.record`),
   and write `verdict.json`, `summary.md` and the report into the run directory.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from omegaconf import DictConfig
from rich.console import Console
from rich.markup import escape

from framework.analysis.bias import client_bias
from framework.errors import LedgerError, StorageError
from framework.execution import adapters
from framework.execution.launcher import install_signal_handlers
from framework.present.progress import make_console, print_noise, print_verdict_table
from framework.present.report import summary_markdown, write_report
from framework.records import ledger, registration
from framework.records.registration import analysis_settings
from framework.records.trials import client_bottlenecks, late_client_reason
from framework.run import confirmation
from framework.run.context import RunContext
from framework.run.definition import carried
from framework.run.handoff import write_pending
from framework.run.measure import measure
from framework.run.record import build_record, server_info_of, timing
from framework.run.resolve import resolve_config
from framework.run.session import Session, open_context
from framework.run.writer import now_iso, previous_verdict


def resolve(cfg: DictConfig, run_dir: Path, cwd: Path | None = None) -> RunContext:
    """Everything a run needs, checked (the one resolver, then the session's context). Relative paths are taken
    from `cwd` (where the user ran)."""
    ctx = open_context(cfg, resolve_config(cfg), run_dir, cwd)
    exploration = confirmation.exploration_of(ctx.ledger, ctx.hypothesis.name)
    if exploration is not None:  # a search's confirmation, however it is run: its record links the search
        ctx.extra["search"] = confirmation.link(exploration)
    return ctx


def run(ctx: RunContext, console: Console | None = None) -> dict[str, Any]:
    """Run the experiment for a resolved context; returns the verdict record as stored."""
    console = console or make_console()
    install_signal_handlers()
    try:
        ctx.run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageError(f"{ctx.run_dir}: cannot create the run directory ({exc.strerror})") from None
    settings = analysis_settings(ctx.design)
    carry = sorted(carried(ctx.config.get("resume_carry")))
    if ctx.ledger_writer == "submitter":  # a sweep job: the submitting process registered it (run.handoff)
        reg_hash, amended = registration.in_force(ctx.ledger, ctx.hypothesis_path, settings, ctx.allow_amend)
    else:
        reg_hash, amended = registration.check_or_amend(ctx.ledger, ctx.hypothesis_path, settings, ctx.allow_amend,
                                                        carried_over=carry or None)
    started = now_iso()  # after the registration: the record's start is never before the plan it ran under

    if carry:
        console.print(escape(f"warning: resume_carry: {len(carry)} launch(es) carried over whatever definition they "
                             f"were measured under ({', '.join(carry[:4])}{', ...' if len(carry) > 4 else ''}); "
                             f"the amendment {reg_hash[:12]} and the record list them"),
                      style="yellow", highlight=False)
    session = Session(ctx)  # opened below: the secrets' redactor, the trials file, a resume's launches
    cov = ctx.sim_coverage or {}
    for line in cov.get("unmodelled_varied") or []:
        console.print(escape(f"warning: sim.allow_unmodelled=true: the simulator does not model this: {line}; "
                             "every verdict of this run is marked NOT MODELLED"), style="bold red", highlight=False)
    previous = previous_verdict(ctx)  # read before this run's verdict.json replaces it
    with session:
        measured = measure(session, console)
    writer, trials = session.writer, session.trials
    assert writer is not None
    info = server_info_of(trials)  # once per run: the adapter, the timing and the record read it
    bias = client_bias(trials.of_kind("workload"), ctx.hypothesis.metric)
    adapter = adapters.for_server(ctx.backend.table, info)
    lag = timing(ctx, writer.rows, adapter)
    for line in adapter.warnings(ctx.hypothesis, lag, ctx.backend.speedup) if adapter is not None else []:
        console.print(escape(line), style="yellow", highlight=False)
    late_client = client_bottlenecks(writer.rows)
    if late_client:
        console.print(escape(f"warning: the client, not the server, may have been the bottleneck in "
                             f"{len(late_client)} launch(es) ({', '.join(late_client[:3])}"
                             f"{', ...' if len(late_client) > 3 else ''}): {late_client_reason(writer.rows)}; "
                             f"the figures include the client's lateness (analysis.workloads.*.client)"
                             f"{_client_bias_line(ctx, bias)}"),
                      style="yellow", highlight=False)
    record = build_record(ctx, writer, measured, settings, reg_hash=reg_hash, amended=amended, lag=lag,
                          started=started, previous=previous, adapter=adapter, info=info, bias=bias)
    unsealed = ctx.redactor.scrub(record.to_json_dict())
    if ctx.ledger_writer == "submitter":
        write_pending(ctx.run_dir, ctx.ledger, unsealed)
        _write_outputs(ctx, unsealed, console)
        console.print(escape(f"ledger: {ctx.ledger} (the process that submitted the sweep appends this record)  "
                             f"run: {ctx.run_dir}"), highlight=False)
        return unsealed
    try:
        stored = ledger.append(ctx.ledger, unsealed)
    except LedgerError as exc:  # the ledger is as it was; keep what can be kept and say how to record it
        kept = _write_outputs(ctx, unsealed, console)
        where = (f"{', '.join(kept)} (without a ledger hash) are in {ctx.run_dir}" if kept else
                 f"nothing more could be written to {ctx.run_dir}")
        raise LedgerError(f"{exc}; the verdict is not in the ledger: {where}; free space and record it "
                          f"with resume={ctx.run_dir}") from None
    _write_outputs(ctx, stored, console)
    console.print(escape(f"ledger: {ctx.ledger}  run: {ctx.run_dir}"), highlight=False)
    return stored


def _client_bias_line(ctx: RunContext, summary: dict[str, Any] | None) -> str:
    """How far the client's lateness may have moved the hypothesis's metric (`summary`: the run's
    analysis.bias.client_bias), and what it marks."""
    if summary is None:
        return f"; {ctx.hypothesis.metric} does not depend on the client's timing"
    size = f"up to {summary['bias']:.1%}" if summary["bias"] is not None else "by an unknown amount"
    if summary["saturated"]:
        size = f"by more than {summary['bias'] or 0:.1%} (saturated in {len(summary['saturated'])} launch(es))"
    return (f"; {ctx.hypothesis.metric} may be off {size}: verdicts it could move are marked UNRELIABLE "
            f"(a lighter load, or more cores for the client)")


def _write_whole(path: Path, text: str) -> None:
    """Replace `path` with `text` or leave it as it was (a full disk never leaves half a verdict.json)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


def _write_outputs(ctx: RunContext, record: dict[str, Any], console: Console) -> list[str]:
    """`verdict.json`, `summary.md`, the tables and the report; the names of those written. A record
    without its ledger hash is one the ledger does not hold (yet): resume does not take it as a verdict."""
    kept: list[str] = []
    try:
        _write_whole(ctx.run_dir / "verdict.json", json.dumps(record, indent=2) + "\n")
        kept.append("verdict.json")
        (ctx.run_dir / "summary.md").write_text(summary_markdown(record), encoding="utf-8")
        kept.append("summary.md")
    except OSError as exc:
        safe = (f"the verdict is in the ledger as {record['hash'][:12]}" if record.get("hash") else
                "the verdict is not in the ledger")
        console.print(escape(f"warning: {ctx.run_dir}: cannot write {'summary.md' if kept else 'verdict.json'} "
                             f"({exc.strerror}); {safe}"), style="yellow", highlight=False)
    print_noise(console, record)
    print_verdict_table(console, record)
    if ctx.report and kept:
        try:
            write_report(ctx.run_dir)
            kept.append("the report")
        except Exception as exc:  # a report is a convenience; the verdict is already safe
            console.print(f"[yellow]report not written: {escape(str(exc))}[/yellow]")
    try:
        ctx.redactor.scrub_tree(ctx.run_dir)  # server logs, .hydra/ (a key set in a config file), the report
    except OSError as exc:
        console.print(escape(f"warning: {ctx.run_dir}: cannot redact its files ({exc.strerror})"), style="yellow",
                      highlight=False)
    return kept
