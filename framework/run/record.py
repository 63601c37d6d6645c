"""The verdict record of a run: everything its verdict depends on, or the hash of it (design notes, section 4),
with the marks a verdict must carry when the figures behind it are in doubt."""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType
from typing import Any

from framework.analysis.bias import client_marks
from framework.analysis.outputs import compares_outputs
from framework.analysis.ruleset import LATEST, RULESETS
from framework.core import design as design_mod
from framework.core.hashing import sha256_file
from framework.core.trials import Trials
from framework.execution import adapters
from framework.execution.backends import backend_label, probe_values
from framework.records import environment
from framework.records.models import (
    ConditionRecord,
    HypothesisRef,
    LaunchCounts,
    PredictionRecord,
    TrialsRef,
    VerdictRecord,
)
from framework.records.trials import release_summary, workload_records
from framework.run.context import RunContext
from framework.run.definition import carried
from framework.run.measure import Measured
from framework.run.writer import TrialsWriter, now_iso
from framework.stats.extension import extension, launches_of


def server_info_of(trials: Trials) -> dict[str, Any] | None:
    """The first launch's own description of the server (`/get_server_info`)."""
    return next((r["server_info"] for r in trials.of_kind("launch") if r.get("server_info")), None)


def timing(ctx: RunContext, rows: list[dict[str, Any]], adapter: ModuleType | None) -> dict[str, Any]:
    """How honest a modelled server's clock was (the record's `analysis.sim_*`); nulls for a real server."""
    if adapter is None:
        return dict(adapters.NO_TIMING)
    return adapter.timing(ctx.hypothesis, ctx.experiment, rows, launched=ctx.backend.simulated)


def build_record(ctx: RunContext, writer: TrialsWriter, measured: Measured, settings: dict[str, Any], *,
                 reg_hash: str, amended: bool, lag: dict[str, Any], started: str,
                 previous: dict[str, Any] | None = None, adapter: ModuleType | None = None,
                 info: dict[str, Any] | None = None, bias: dict[str, Any] | None = None) -> VerdictRecord:
    """The verdict record (design notes, section 4): everything the verdict depends on, or its hash.

    `info` and `bias` are the run's `server_info_of` and `client_bias`, computed once by the run."""
    h, d, analysis = ctx.hypothesis, ctx.design, measured.analysis
    conds = design_mod.conditions(h)
    backend = backend_label(ctx.backend, info)
    env = environment.fingerprint()
    env.update(backend=backend, launcher=ctx.backend.name, server=_server_summary(info))
    row = ctx.backend.table
    env.update(environment.backend_environment(
        version_package=row.version_package, version_argv=row.version_argv, build_info_argv=row.build_info_argv,
        python=ctx.backend.python if "{python}" in " ".join(row.argv) else None, values=probe_values(ctx.backend),
        model_path=ctx.experiment.model_path,
        model_is_local=row.starts_server or Path(ctx.experiment.model_path).exists(), server_info=info))
    client = bias if RULESETS[LATEST].client_marks else None
    crashes: dict[int, set[str]] = {}
    for end in Trials(writer.rows).of_kind("launch_end"):  # rows as written: a resumed run's may be older
        if end.get("error"):
            crashes.setdefault(end["condition"], set()).add(end["error"])
    return VerdictRecord(
        hypothesis=HypothesisRef(
            name=h.name, sha256=sha256_file(ctx.hypothesis_path), statement=h.statement.strip(),
            path=str(ctx.hypothesis_path), content=ctx.hypothesis_path.read_text(encoding="utf-8"),
        ),
        backend=backend,
        verdict=analysis.verdict,
        predictions=[PredictionRecord(**p.model_dump(), marks=prediction_marks(ctx, p.model_dump(), lag, adapter,
                                                                           client))
                     for p in analysis.predictions],
        conditions=[
            ConditionRecord(
                levels=c.levels,
                server_args=design_mod.server_args_for(h, ctx.experiment, conds[c.index]),
                launches=LaunchCounts(**c.launches),
                metric=c.metric.model_dump(),
                failures=sorted({*c.failures, *crashes.get(c.index, set())}),
                outlier_launches=c.outlier_launches,
                losses=(analysis.details.get("losses") or {}).get(str(c.index)),
            )
            for c in analysis.conditions
        ],
        trials=TrialsRef(path=_relative_to(writer.path, ctx.ledger.resolve().parent), sha256=sha256_file(writer.path),
                         rows=len(writer.rows), bytes=writer.path.stat().st_size),
        environment=env,
        config=ctx.config,
        analysis={
            **settings,
            "design": d.model_dump(mode="json"),
            "details": analysis.details,
            "stopping": {"sequential": d.sequential.enabled, "looks": measured.looks, "reason": measured.stop_reason,
                         "launches_per_condition": _launches_per_condition(writer.rows)},
            "resumed_from": _resumed_from(ctx),
            "definition": ctx.definition,  # what its own launches were measured under (framework.core.definition)
            **_carried_over(ctx, writer.rows),
            "extension": extension(previous, d.model_dump(mode="json"), d.analysis, d.alpha,
                                   launches_of(previous), chain=RULESETS[LATEST].chain_extensions)
            if previous else None,
            "launch_attempts": _attempts_summary(writer.rows),
            "release": release_summary(writer.rows),
            "amended": amended,
            "workloads": workload_records(writer.rows),
            **server_counters(writer.rows),
            **lag,
            "sim_coverage": ctx.sim_coverage,
            **_twin_predictions(ctx, adapter),
        },
        population=population(analysis.details, d.machines),
        run_dir=str(ctx.run_dir),
        **({"search": ctx.extra["search"]} if ctx.extra.get("search") else {}),  # the search it confirms (audit)
        registration=reg_hash,
        started=started,
        finished=now_iso(),
    )



def _twin_predictions(ctx: RunContext, adapter: ModuleType | None) -> dict[str, Any]:
    """A fitted twin's prediction interval of every metric, per condition (backend=sim on a twin profile only)."""
    make = getattr(adapter, "twin_predictions", None) if ctx.backend.simulated else None
    got = make(ctx.hypothesis, ctx.experiment, requests=ctx.design.requests, warmup=ctx.design.warmup) if make else None
    return {"twin_predictions": got} if got else {}


def _carried_over(ctx: RunContext, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """`carried_over`: the launches of another definition a resume reused by name (`resume_carry=`), as the
    amendment the run appended lists them; nothing when none was named."""
    carry = carried(ctx.config.get("resume_carry"))
    if not carry:
        return {}
    ids = sorted(str(r["launch_id"]) for r in Trials(rows).of_kind("launch")
                 if r.get("launch_id") in carry or str(r.get("launch_id")).rpartition("-a")[0] in carry)
    return {"carried_over": ids}


def _resumed_from(ctx: RunContext) -> str | list[str] | None:
    """The run directory a resume reused, or the list of them (`resume=[A,B]`)."""
    if ctx.resume is None:
        return None
    return [str(p) for p in [ctx.resume, *ctx.resume_also]] if ctx.resume_also else str(ctx.resume)


def population(details: dict[str, Any], design_machines: int) -> dict[str, Any] | None:
    """The machines the verdict covers (framework.analysis.machines.population), with the design's count; None
    under rules before version 3."""
    pop = details.get("population")
    if pop is None:
        return None
    out = {**pop, "design_machines": design_machines}
    if design_machines > pop["machines"]:
        out["note"] = (f"the design spreads its launches over {design_machines} machines, but they ran on "
                       f"{pop['machines']}: the verdict covers {pop['scope']}"
                       + (f" ({pop['labels_note']})" if pop.get("labels_note") else ""))
    return out


def prediction_marks(ctx: RunContext, prediction: dict[str, Any], lag: dict[str, Any],
                     adapter: ModuleType | None, client: dict[str, Any] | None = None) -> list[str]:
    """What must be said beside a verdict: the sim ran a question it does not model (override), its
    clock's measured bias is large enough to move the decision, open-loop arrivals reached it late, or
    the client fell behind by enough to move it (`client`: analysis.bias.client_bias of the run's rows)."""
    marks: list[str] = []
    if compares_outputs(prediction):  # generated tokens compared: no timing figure can move it
        return marks
    cov = ctx.sim_coverage or {}
    if cov.get("unmodelled_varied_flags"):
        marks.append("NOT MODELLED by the sim: " + ", ".join(cov["unmodelled_varied_flags"]) + " varies")
    if adapter is not None:
        marks += adapter.marks(ctx.hypothesis, prediction, lag)
    marks += client_marks(ctx.hypothesis, prediction, client)
    details = prediction.get("details") or {}
    if (details.get("drift") or {}).get("detected"):
        marks.append("EFFECT CHANGED DURING THE RUN")
    marks += [c["mark"] for c in details.get("caveats") or []]  # why a decided verdict may be wrong (rules v2)
    return marks


def server_counters(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The servers' own counters summed per condition over its launches (each launch_end row's `server_metrics`),
    with each per request the server counted (`requests_total`): the mechanism beside a verdict, such as
    prompt lookup's drafted and accepted tokens (framework.servers.llamacpp_spec). Empty when no server sent any."""
    by: dict[str, dict[str, Any]] = {}
    for end in Trials(rows).of_kind("launch_end"):
        counters = end.get("server_metrics") or {}
        numeric = {k: float(v) for k, v in counters.items() if isinstance(v, (int, float))}
        if not numeric:
            continue
        label = ", ".join(f"{k}={v}" for k, v in (end.get("levels") or {}).items())
        entry = by.setdefault(label, {"launches": 0, "totals": {}})
        entry["launches"] += 1
        for k, v in numeric.items():
            entry["totals"][k] = entry["totals"].get(k, 0.0) + v
    for entry in by.values():
        t = entry["totals"]
        requests = next((v for k, v in t.items() if k.endswith("requests_total")), None)
        if requests:
            entry["per_request"] = {k: v / requests for k, v in t.items() if not k.endswith("requests_total")}
        drafted = next((v for k, v in t.items() if k.endswith("drafted_tokens_total")), None)
        accepted = next((v for k, v in t.items() if k.endswith("accepted_tokens_total")), None)
        if drafted and accepted is not None:
            entry["accept_rate"] = accepted / drafted
    return {"server_counters": by} if by else {}


def _launches_per_condition(rows: list[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in Trials(rows).of_kind("launch"):
        out[str(r["condition"])] = out.get(str(r["condition"]), 0) + 1
    return out

def _attempts_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {r["launch_id"]: {"attempt": r.get("attempt", 1), "reused_from": r.get("reused_from"),
                             **({"client_workers": r["client_workers"]} if "client_workers" in r else {})}
            for r in Trials(rows).of_kind("launch")}

def _server_summary(info: dict[str, Any] | None) -> dict[str, Any] | None:
    if not info:
        return None
    keep = ("version", "sim_version", "model_path", "tp_size", "sim_profile", "sim_speedup", "backend")
    return {k: info.get(k) for k in keep if k in info} | {"server_args": info}

def _relative_to(path: Path, base: Path) -> str:
    try:
        return os.path.relpath(path.resolve(), base)
    except ValueError:
        return str(path.resolve())
