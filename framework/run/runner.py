"""The imperative shell of `python -m framework run`: launch, measure, write, analyse, record.

Order of work for one run:

1. resolve the config into a hypothesis, an experiment, a backend and an effective design
   (all checked before any server starts);
2. register the hypothesis in the ledger (or refuse if it changed since registration);
3. launch every planned (condition, replicate) in randomized blocks, writing each launch
   outcome and each request to `trials.jsonl` the moment it happens;
4. analyse the trials (pure), append one verdict record to the ledger, and write
   `verdict.json`, `summary.md` and the report into the run directory.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

from omegaconf import DictConfig, OmegaConf
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

from framework.core import design as design_mod
from framework.analysis.verdicts import Analysis, analyze
from framework.execution import client
from framework.execution.backends import (
    BackendConfigError, BackendSettings, backend_label, server_spec, time_scale_of,
)
from framework.execution.backends import check as check_backend
from framework.execution.failures import classify
from framework.execution.launcher import (
    ENDPOINT_PROBE_S, LaunchError, ServerProcess, free_port, install_signal_handlers, log_tail, unreachable,
)
from framework.run.preflight import backend_fits, backend_settings, check_pair
from framework.run.redaction import Redactor, ledger_salt, secret_values
from framework.present.progress import RunProgress, make_console, print_noise, print_verdict_table
from framework.records.models import (
    ConditionRecord, HypothesisRef, LaunchCounts, PredictionRecord, TrialsRef, VerdictRecord,
)
from framework.records.ledger import sha256_file
from framework.records.trials import (
    LaunchEndRow, LaunchRow, RequestRow, WorkloadRow, client_bottlenecks, late_client_reason, read_json_object,
    read_trials, release_summary, workload_records,
)
from framework.servers.sim.fidelity import (
    SIM_LAG_WARN, decision_could_move, open_loop_mark, sim_clock_bias, sim_metric_lags, sim_open_loop_lateness,
    sim_relative_lag,
)
from framework.core.spec import Design, Experiment, Hypothesis, SpecError, load_experiment, load_hypothesis


class ConfigError(SpecError):
    """A bad command-line or config value (reported like a spec error: file/field/what is allowed)."""


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# --------------------------------------------------------------------------- resolving the config


@dataclass
class RunContext:
    hypothesis: Hypothesis
    hypothesis_path: Path
    experiment: Experiment
    backend: BackendSettings
    design: Design
    ledger: Path
    run_dir: Path
    config: dict[str, Any]
    resume: Path | None = None
    allow_amend: bool = False
    sim_coverage: dict[str, Any] | None = None  # what the sim does not model here (backend=sim only)
    progress: bool = True
    report: bool = True
    extra: dict[str, Any] = field(default_factory=dict)
    redactor: Redactor = field(default_factory=Redactor)


def project_root() -> Path | None:
    """The checkout the package runs from, or None for an installed package (site-packages is no project)."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").is_file() else None


def search_dirs(kind_dir: str) -> list[Path]:
    """Where `kind_dir` is looked up: the working directory, then the checkout (when there is one)."""
    root = project_root()
    return [Path(kind_dir)] + ([root / kind_dir] if root is not None else [])


def find_file(kind_dir: str, name: str, suffix: str = ".yaml") -> Path:
    """A name in the configured directory (relative to the working directory, else the checkout)."""
    candidate = Path(name)
    if candidate.suffix in (".yaml", ".yml") and candidate.exists():
        return candidate
    for base in search_dirs(kind_dir):
        path = base / f"{name}{suffix}"
        if path.exists():
            return path
    return Path(kind_dir) / f"{name}{suffix}"


def available(kind_dir: str) -> list[str]:
    for base in search_dirs(kind_dir):
        if base.is_dir():
            return sorted(p.stem for p in base.glob("*.yaml"))
    return []


def load_pair(cfg: DictConfig | dict[str, Any]) -> tuple[Hypothesis, Path, Experiment]:
    name = cfg["hypothesis"]
    hyp_dir, exp_dir = cfg["paths"]["hypotheses"], cfg["paths"]["experiments"]
    h_path = find_file(hyp_dir, str(name))
    if not h_path.exists():
        raise ConfigError("command line", "hypothesis", f"no hypothesis {name!r}; available: {available(hyp_dir)}")
    h = load_hypothesis(h_path)
    e_path = find_file(exp_dir, h.experiment)
    if not e_path.exists():
        raise SpecError(h_path, "experiment", f"no experiment {h.experiment!r} in {exp_dir}/; available: {available(exp_dir)}")
    exp = load_experiment(e_path)
    check_pair(h, h_path, exp)  # every level's workload, env and python, before anything starts
    return h, h_path, exp


def effective_design(base: Design, overrides: dict[str, Any], h: Hypothesis | None = None) -> Design:
    """The hypothesis's design with the command line's non-null `design.*` values on top.

    A sequential design without `max_launches` gets the cap derived from `launches`: the
    group-sequential one, or under `analysis: anytime` the anytime rule's, raised to the launches
    its launch-outcome predictions (of `h`) need to be decided at all (docs/statistics.md, sections
    5 and 10, "The cap"), so the record always states the cap the run used.
    """
    data = base.model_dump()
    seq = dict(data["sequential"])
    for key, value in overrides.items():
        if value is None:
            continue
        if key == "sequential":
            seq["enabled"] = value
        elif key in ("block", "max_launches"):
            seq[key] = value
        else:
            data[key] = value
    data["sequential"] = seq
    try:
        d = Design.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise ConfigError("command line", f"design.{loc}", f"{err['msg']} (got {err.get('input')!r})") from None
    if d.sequential.enabled and d.sequential.max_launches is None:
        from framework.analysis.planning import anytime_cap, anytime_launch_floor
        from framework.stats.sequential import sequential_cap

        if d.analysis == "anytime":
            cap = anytime_cap(d.launches, d.sequential.block, d.alpha)
            if h is not None:
                cap = max(cap, anytime_launch_floor(h, d.sequential.block, d.alpha))
        else:
            cap = sequential_cap(d.launches, d.sequential.block, d.alpha)
        d = d.model_copy(update={"sequential": d.sequential.model_copy(update={"max_launches": cap})})
    return d


def resolve(cfg: DictConfig, run_dir: Path, cwd: Path | None = None) -> RunContext:
    """Everything a run needs, checked. Relative paths are taken from `cwd` (where the user ran)."""
    h, h_path, exp = load_pair(cfg)
    ledger = Path(cfg.ledger)
    if cwd is not None and not ledger.is_absolute():
        ledger = cwd / ledger
    backend = backend_settings(OmegaConf.to_container(cfg.backend, resolve=True))  # type: ignore[arg-type]
    try:
        check_backend(backend, exp)
    except BackendConfigError as exc:
        raise ConfigError("command line", exc.field, exc.message) from None
    d = effective_design(h.design, OmegaConf.to_container(cfg.design, resolve=True), h)  # type: ignore[arg-type]
    backend_fits(backend, h)
    coverage = None
    if backend.simulated:
        sim_cfg = cfg.get("sim") or {}
        coverage = sim_coverage_or_refuse(h, h_path, exp, allow=bool(sim_cfg.get("allow_unmodelled", False)))
    resume = Path(cfg.resume) if cfg.get("resume") else None
    if resume is not None:
        resume = _resume_dir(resume, run_dir)
    return RunContext(
        hypothesis=h, hypothesis_path=h_path, experiment=exp, backend=backend, design=d,
        ledger=ledger, run_dir=run_dir,
        config=OmegaConf.to_container(cfg, resolve=True),  # type: ignore[arg-type]
        resume=resume, allow_amend=bool(cfg.allow_amend), sim_coverage=coverage,
        progress=bool(cfg.progress) and sys.stdout.isatty(), report=bool(cfg.report),
    )


ALLOW_UNMODELLED = "sim.allow_unmodelled=true"


def sim_coverage_or_refuse(h: Hypothesis, h_path: Path, exp: Experiment, *, allow: bool) -> dict[str, Any]:
    """Refuse, before anything starts, a hypothesis whose levels differ in what the sim does not model
    (framework.servers.sim.coverage); with the override, what the record and the verdicts must say."""
    from framework.servers.sim import coverage

    cov = coverage.check(design_mod.sim_conditions(h, exp))
    if cov.problems:
        raise SpecError(h_path, "server_args", f"the SGLang command line does not parse: {cov.problems[0]}")
    if cov.refused and not allow:
        first = cov.refused[0]
        more = f" (and {len(cov.refused) - 1} more)" if len(cov.refused) > 1 else ""
        raise SpecError(h_path, "factors",
                        f"the simulator cannot answer this: {first.line()}{more}; run it on backend=sglang, or add "
                        f"{ALLOW_UNMODELLED} to run on the sim anyway with every verdict marked not modelled")
    return {**cov.as_dict(), "override": bool(cov.refused)}


def _resume_dir(path: Path, run_dir: Path) -> Path:
    """A run directory, or a sweep directory holding one whose name matches this job's."""
    if (path / "trials.jsonl").exists():
        return path
    candidate = path / run_dir.name
    if (candidate / "trials.jsonl").exists():
        return candidate
    if path.is_dir():
        # Not started in the interrupted sweep: nothing to reuse, run from scratch.
        return candidate
    raise ConfigError("command line", "resume", f"{path} is not a run directory (no trials.jsonl)")


# --------------------------------------------------------------------------- the trials file


class TrialsWriter:
    """Append-only JSONL, one line per event, flushed at once (threads share it under a lock)."""

    def __init__(self, path: Path, redactor: Redactor | None = None) -> None:
        self.path = path
        self.redactor = redactor or Redactor()
        self._lock = threading.Lock()
        self._f = open(path, "a", encoding="utf-8")
        self.rows: list[dict[str, Any]] = []

    def write(self, row: dict[str, Any]) -> None:
        row = self.redactor.scrub(row)
        line = json.dumps(row, separators=(",", ":"), sort_keys=True) + "\n"
        with self._lock:
            self._f.write(line)
            self._f.flush()
            self.rows.append(row)

    def sync(self) -> None:
        with self._lock:
            self._f.flush()
            os.fsync(self._f.fileno())

    def close(self) -> None:
        self.sync()
        self._f.close()


def completed_launches(rows: Iterable[dict[str, Any]], requests_n: int) -> dict[str, list[dict[str, Any]]]:
    """Launches whose outcome is complete: a start-up failure, or a finished workload.

    The client's `workload` row is written when a launch's workload has ended; trials files from
    before it existed fall back to counting `requests_n` measured requests.
    """
    by_launch: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_launch.setdefault(row["launch_id"], []).append(row)
    done = {}
    marked = any(r["kind"] == "workload" for group in by_launch.values() for r in group)
    for launch_id, group in by_launch.items():
        launch = [r for r in group if r["kind"] == "launch"]
        if not launch:
            continue
        measured = [r for r in group if r["kind"] == "request" and not r["warmup"]]
        ended = any(r["kind"] == "workload" for r in group) if marked else len(measured) >= requests_n
        if not launch[-1]["ok"] or ended:
            done[launch_id] = group
    return done


# --------------------------------------------------------------------------- one launch


CLASSIFY_LINES = 400  # log lines read to classify a failure (a vLLM traceback runs long); the row keeps 20
CRASH_SETTLE_S = 5.0  # after a lost connection, how long a dying server gets to exit before it counts as alive


def run_launch(ctx: RunContext, planned: design_mod.PlannedLaunch, attempt: int,
               writer: TrialsWriter, progress: RunProgress) -> None:
    h, d = ctx.hypothesis, ctx.design
    cond = planned.condition
    workload = design_mod.workload_for(h, ctx.experiment, cond)
    launch_id = f"{planned.launch_id}-a{attempt}"
    common = {"launch_id": launch_id, "condition": cond.index, "levels": cond.levels}
    started = now_iso()
    server: ServerProcess | None = None
    row = ctx.backend.table
    if not row.starts_server:
        base_url, argv, startup = str(ctx.backend.url).rstrip("/"), [], 0.0
        problem = unreachable(base_url, min(ctx.backend.ready_timeout_s, ENDPOINT_PROBE_S))
        if problem:  # no answer at all: no evidence about the server (framework.core.evidence)
            writer.write(LaunchRow(
                **common, replicate=planned.replicate, block=planned.block, attempt=attempt, seed=planned.seed,
                ok=False, reachable=False, error=problem, started=started, finished=now_iso(),
            ).model_dump(mode="json"))
            writer.sync()
            progress.launch_failed(cond, problem)
            return
    else:
        port = free_port(ctx.backend.host)
        log_path = ctx.run_dir / "logs" / f"{launch_id}.log"
        spec = server_spec(ctx.backend, ctx.experiment, h, cond, port=port, seed=planned.seed, log_path=log_path)
        base_url, argv = spec.base_url, spec.argv
        server = ServerProcess(spec).start()
        try:
            startup = server.wait_ready()
        except LaunchError as exc:
            server.stop()
            ctx.redactor.scrub_file(log_path)
            failure = classify(exc.exit_code, log_tail(log_path, CLASSIFY_LINES), row.failure_patterns,
                               timed_out=exc.timed_out, summary=exc.message)
            release = server.wait_released(ctx.backend.settle_timeout_s)
            writer.write(LaunchRow(
                **common, replicate=planned.replicate, block=planned.block, attempt=attempt, seed=planned.seed,
                ok=False, exit_code=exc.exit_code, error=failure.message(), failure_class=failure.cls,
                failure_line=failure.line, log_tail=exc.log_tail, argv=argv, started=started, finished=now_iso(),
                release=release.as_dict(),
            ).model_dump(mode="json"))
            writer.sync()
            progress.launch_failed(cond, failure.message())
            return
    lost_connection = False  # a request lost its connection: the server may be dying right now
    try:
        info = client.server_info(base_url, ctx.backend.api_key, row.info_paths)
        writer.write(LaunchRow(
            **common, replicate=planned.replicate, block=planned.block, attempt=attempt, seed=planned.seed,
            ok=True, startup_s=startup, argv=argv, server_info=info, started=started, finished=now_iso(),
        ).model_dump(mode="json"))

        def on_row(index: int, warmup: bool, row: dict[str, Any]) -> None:
            nonlocal lost_connection
            lost_connection |= row.get("error_class") == "connection"
            writer.write(RequestRow(
                **common, trial_id=f"{launch_id}-q{index}", index=index, warmup=warmup, **row,
            ).model_dump(mode="json"))
            progress.request_done(warmup)

        resolved = client.run_workload(
            base_url, workload, requests_n=d.requests, warmup=d.warmup, seed=planned.seed,
            time_scale=time_scale_of(ctx.backend, info), api_key=ctx.backend.api_key, on_row=on_row,
            protocol=ctx.backend.effective_protocol, base_dir=ctx.hypothesis_path.parent,
        )
        writer.write(WorkloadRow(**common, **resolved).model_dump(mode="json"))
        health = resolved.get("client") or {}
        if health.get("bottleneck"):
            progress.note(f"warning: the client, not the server, may have been the bottleneck in {launch_id}: "
                          + "; ".join(health.get("reasons") or []))
    finally:
        if server is not None:
            end_launch(ctx, server, common, writer, progress, cond, lost_connection=lost_connection)
        writer.sync()


def end_launch(ctx: RunContext, server: ServerProcess, common: dict[str, Any], writer: TrialsWriter,
               progress: RunProgress, cond: design_mod.Condition, lost_connection: bool = False) -> None:
    """Stop a server that started; record whether it had died on its own and how long the machine took to free up.

    After a request lost its connection the server gets `CRASH_SETTLE_S` to finish dying before it counts as alive.
    """
    crashed = server.exited_on_its_own(wait_s=CRASH_SETTLE_S if lost_connection else 0.0)
    counters = client.server_metrics(server.spec.base_url, ctx.backend) if crashed is None else None
    exit_code = server.stop()
    ctx.redactor.scrub_file(server.spec.log_path)
    failure = None
    if crashed is not None:
        failure = classify(crashed, log_tail(server.spec.log_path, CLASSIFY_LINES), ctx.backend.table.failure_patterns,
                           after_ready=True, summary=f"server exited with code {crashed} while being measured")
        progress.launch_failed(cond, failure.message())
    release = server.wait_released(ctx.backend.settle_timeout_s)
    writer.write(LaunchEndRow(
        **common, ok=crashed is None, exit_code=exit_code, crashed=crashed is not None,
        failure_class=failure.cls if failure else None, failure_line=failure.line if failure else None,
        error=failure.message() if failure else None, release=release.as_dict(), server_metrics=counters,
        finished=now_iso(),
    ).model_dump(mode="json"))


# --------------------------------------------------------------------------- the whole run


@dataclass
class Measured:
    """What the measuring loop leaves: the final analysis and how the run came to stop."""

    analysis: Analysis
    looks: list[dict[str, Any]]
    stop_reason: str


def run(ctx: RunContext, console: Console | None = None) -> dict[str, Any]:
    """Run the experiment for a resolved context; returns the verdict record as stored."""
    from framework.records import ledger, registration

    console = console or make_console()
    install_signal_handlers()
    ctx.run_dir.mkdir(parents=True, exist_ok=True)
    started = now_iso()
    settings = analysis_settings(ctx.design)
    reg_hash, amended = registration.check_or_amend(ctx.ledger, ctx.hypothesis_path, settings, ctx.allow_amend)

    secrets = tuple(secret_values(ctx.config.get("backend") or {}))
    if secrets:
        ctx.redactor = Redactor(secrets, ledger_salt(ctx.ledger))
        ctx.config = ctx.redactor.scrub(ctx.config)
        ctx.redactor.scrub_tree(ctx.run_dir / ".hydra")  # a key set in a config file: gone before any launch
    cov = ctx.sim_coverage or {}
    for line in cov.get("unmodelled_varied") or []:
        console.print(escape(f"warning: sim.allow_unmodelled=true: the simulator does not model this: {line}; "
                             "every verdict of this run is marked NOT MODELLED"), style="bold red", highlight=False)
    previous = _previous_verdict(ctx)  # read before this run's verdict.json replaces it
    writer = TrialsWriter(ctx.run_dir / "trials.jsonl", ctx.redactor)
    try:
        reused, attempts = _reuse(ctx, writer)
        measured = measure(ctx, writer, reused, attempts, console)
    finally:
        writer.close()

    metric_lags = sim_metric_lags(writer.rows, ctx.hypothesis.metric)
    lag = {"sim_max_relative_lag": sim_relative_lag(writer.rows),
           "sim_metric_relative_lag_median": statistics.median(metric_lags) if metric_lags else None,
           "sim_metric_relative_lag_max": max(metric_lags) if metric_lags else None}
    biases = sim_clock_bias(ctx.hypothesis, ctx.experiment, writer.rows) if ctx.backend.simulated else {}
    lag["sim_clock_bias"] = biases
    lag["sim_clock_bias_max"] = max(biases.values()) if biases else None
    worst = lag["sim_clock_bias_max"]
    if worst is not None and worst > SIM_LAG_WARN:
        console.print(f"[yellow]warning: the machine could not keep the simulator's batch full: measured bias of "
                      f"the model clock up to {worst:.1%} ({', '.join(f'{k}: {v:.1%}' for k, v in biases.items())}); "
                      f"verdicts it could move are marked UNRELIABLE; lower backend.speedup "
                      f"(now {ctx.backend.speedup:g})[/yellow]")
    late = sim_open_loop_lateness(writer.rows)
    lag["sim_open_loop_arrival_late"] = late
    if open_loop_mark(late):
        console.print(f"[yellow]warning: open-loop requests reached the simulator's model clock late against their "
                      f"schedule: median {late['median_s'] * 1e3:.1f} ms, max {late['max_s'] * 1e3:.1f} ms of model "
                      f"time ({late['median_relative']:.1%} of a median request); the sim does not correct this "
                      f"(docs/model.md, Timing), so verdicts are marked UNRELIABLE: lower backend.speedup "
                      f"(now {ctx.backend.speedup:g})[/yellow]")
    typical = lag["sim_metric_relative_lag_median"]
    if typical is not None and typical > SIM_LAG_WARN:
        console.print(f"[yellow]warning: the simulator could not keep its clock: in a typical measured request its "
                      f"lateness may have moved {ctx.hypothesis.metric} by up to {typical:.1%}; lower "
                      f"backend.speedup (now {ctx.backend.speedup:g})[/yellow]")
    late_client = client_bottlenecks(writer.rows)
    if late_client:
        console.print(escape(f"warning: the client, not the server, may have been the bottleneck in "
                             f"{len(late_client)} launch(es) ({', '.join(late_client[:3])}"
                             f"{', ...' if len(late_client) > 3 else ''}): {late_client_reason(writer.rows)}; "
                             f"the figures include the client's lateness (analysis.workloads.*.client)"),
                      style="yellow", highlight=False)
    record = build_record(ctx, writer, measured, settings, reg_hash=reg_hash, amended=amended, lag=lag,
                          started=started, previous=previous)
    stored = ledger.append(ctx.ledger, ctx.redactor.scrub(record.to_json_dict()))
    (ctx.run_dir / "verdict.json").write_text(json.dumps(stored, indent=2) + "\n", encoding="utf-8")
    from framework.present.report import summary_markdown

    (ctx.run_dir / "summary.md").write_text(summary_markdown(stored), encoding="utf-8")
    print_noise(console, stored)
    print_verdict_table(console, stored)
    if ctx.report:
        try:
            from framework.present.report import write_report

            write_report(ctx.run_dir)
        except Exception as exc:  # a report is a convenience; the verdict is already safe
            console.print(f"[yellow]report not written: {escape(str(exc))}[/yellow]")
    ctx.redactor.scrub_tree(ctx.run_dir)  # server logs, .hydra/ (a key set in a config file), the report
    console.print(escape(f"ledger: {ctx.ledger}  run: {ctx.run_dir}"), highlight=False)
    return stored


def measure(ctx: RunContext, writer: TrialsWriter, reused: set[str], attempts: dict[str, int],
            console: Console) -> Measured:
    """Launch block after block; a fixed design runs all of them, a sequential one looks after each."""
    from framework.analysis.verdicts import sequential_look

    h, d = ctx.hypothesis, ctx.design
    seq = d.sequential
    max_per_condition = (seq.max_launches or d.launches) if seq.enabled else d.launches
    first_block = min(seq.block, max_per_condition) if seq.enabled else d.launches
    max_looks = math.ceil((max_per_condition - first_block) / seq.block) + 1
    progress = RunProgress(console, h.name, total_launches=len(design_mod.conditions(h)) * max_per_condition,
                           requests_per_launch=requests_per_launch(ctx), enabled=ctx.progress)
    looks: list[dict[str, Any]] = []
    done, block_size = 0, first_block
    with progress:
        while True:
            for planned in design_mod.schedule(h, block_size, d.seed, d.order, first_replicate=done):
                if planned.launch_id in reused:
                    progress.launch_reused(planned.condition)
                    continue
                progress.launch_started(planned.condition, planned.replicate, max_per_condition)
                run_launch(ctx, planned, attempts.get(planned.launch_id, 0) + 1, writer, progress)
                progress.launch_done()
            done += block_size
            if not seq.enabled:
                analysis = analyze(h, writer.rows, alpha=d.alpha, method=d.analysis, seed=d.seed)
                return Measured(analysis, looks, "fixed design: all planned launches done")
            analysis, stop, reason = sequential_look(
                h, writer.rows, look=len(looks) + 1, max_looks=max_looks, alpha=d.alpha, method=d.analysis,
                seed=d.seed)
            looks.append({"look": len(looks) + 1, "launches_per_condition": done, "stop": stop, "reason": reason,
                          "predictions": [p.model_dump(mode="json") for p in analysis.predictions]})
            progress.note(f"look {len(looks)}: {reason}")
            if stop or done >= max_per_condition:
                progress.finish_early()
                final = reason if stop else f"reached design.max_launches={max_per_condition}: {reason}"
                return Measured(analysis, looks, final)
            block_size = min(seq.block, max_per_condition - done)


def build_record(ctx: RunContext, writer: TrialsWriter, measured: Measured, settings: dict[str, Any], *,
                 reg_hash: str, amended: bool, lag: dict[str, float | None], started: str,
                 previous: dict[str, Any] | None = None) -> VerdictRecord:
    """The verdict record (design notes, section 4): everything the verdict depends on, or its hash."""
    from framework.records import environment
    from framework.stats.extension import extension, launches_of

    h, d, analysis = ctx.hypothesis, ctx.design, measured.analysis
    conds = design_mod.conditions(h)
    info = next((r.get("server_info") for r in writer.rows if r["kind"] == "launch" and r.get("server_info")), None)
    backend = backend_label(ctx.backend, info)
    env = environment.fingerprint()
    env.update(backend=backend, launcher=ctx.backend.name, server=_server_summary(info))
    env.update(environment.backend_environment(ctx.backend, ctx.experiment.model_path, server_info=info))
    crashes: dict[int, set[str]] = {}
    for r in writer.rows:
        if r["kind"] == "launch_end" and r.get("error"):
            crashes.setdefault(r["condition"], set()).add(r["error"])
    return VerdictRecord(
        hypothesis=HypothesisRef(
            name=h.name, sha256=sha256_file(ctx.hypothesis_path), statement=h.statement.strip(),
            path=str(ctx.hypothesis_path), content=ctx.hypothesis_path.read_text(encoding="utf-8"),
        ),
        backend=backend,
        verdict=analysis.verdict,
        predictions=[PredictionRecord(**p.model_dump(), marks=prediction_marks(ctx, p.model_dump(), lag))
                     for p in analysis.predictions],
        conditions=[
            ConditionRecord(
                levels=c.levels,
                server_args=design_mod.server_args_for(h, ctx.experiment, conds[c.index]),
                launches=LaunchCounts(**c.launches),
                metric=c.metric.model_dump(),
                failures=sorted({*c.failures, *crashes.get(c.index, set())}),
                outlier_launches=c.outlier_launches,
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
            "resumed_from": str(ctx.resume) if ctx.resume else None,
            "extension": extension(previous, d.model_dump(mode="json"), d.analysis, d.alpha,
                                   launches_of(previous)) if previous else None,
            "launch_attempts": _attempts_summary(writer.rows),
            "release": release_summary(writer.rows),
            "amended": amended,
            "workloads": workload_records(writer.rows),
            **lag,
            "sim_coverage": ctx.sim_coverage,
        },
        run_dir=str(ctx.run_dir),
        registration=reg_hash,
        started=started,
        finished=now_iso(),
    )


def requests_per_launch(ctx: RunContext) -> int:
    """Requests a launch may send (warm-up, measured, a closed loop's cool-down), the most of any condition."""
    from framework.core.workload import total_requests

    counts = []
    for cond in design_mod.conditions(ctx.hypothesis):
        w = design_mod.workload_for(ctx.hypothesis, ctx.experiment, cond)
        cooldown = w.concurrency - 1 if not w.open_loop else 0
        counts.append(sum(total_requests(w, ctx.design.requests, ctx.design.warmup)) + cooldown)
    return max(counts, default=ctx.design.requests + ctx.design.warmup)


def prediction_marks(ctx: RunContext, prediction: dict[str, Any], lag: dict[str, Any]) -> list[str]:
    """What must be said beside a verdict: the sim ran a question it does not model (override), its
    clock's measured bias is large enough to move the decision, or open-loop arrivals reached it late."""
    marks: list[str] = []
    cov = ctx.sim_coverage or {}
    if cov.get("unmodelled_varied_flags"):
        marks.append("NOT MODELLED by the sim: " + ", ".join(cov["unmodelled_varied_flags"]) + " varies")
    bias = lag.get("sim_clock_bias_max")
    if bias and decision_could_move(ctx.hypothesis, prediction, bias):
        marks.append(f"UNRELIABLE: the sim's clock bias (up to {bias:.1%} per condition) could move this decision")
    late = open_loop_mark(lag.get("sim_open_loop_arrival_late"))
    if late and prediction.get("kind") != "launches":
        marks.append(late)
    return marks


def analysis_settings(d: Design) -> dict[str, Any]:
    """What the decision rules depend on besides the data: registered, and kept in every record.

    The sampling plan (launches, requests, sequential looks) is recorded with every verdict but
    not registered, so asking for more launches is not an amendment; changing alpha or the
    analysis method is.
    """
    return {"alpha": d.alpha, "method": d.analysis}


def _reuse(ctx: RunContext, writer: TrialsWriter) -> tuple[set[str], dict[str, int]]:
    """Copy complete launches of an interrupted run into this one; count earlier attempts."""
    if ctx.resume is None or not (ctx.resume / "trials.jsonl").exists():
        return set(), {}
    old_cfg = ctx.resume / ".hydra" / "config.yaml"
    if old_cfg.exists():
        before = OmegaConf.load(old_cfg)
        if before.get("hypothesis") != ctx.config.get("hypothesis"):
            raise ConfigError("command line", "resume",
                              f"{ctx.resume} ran hypothesis {before.get('hypothesis')!r}, not {ctx.config.get('hypothesis')!r}")
    old = read_trials(ctx.resume / "trials.jsonl")
    same_file = (ctx.resume / "trials.jsonl").resolve() == writer.path.resolve()
    attempts: dict[str, int] = {}
    for row in old:
        if row["kind"] == "launch":
            base, _, a = row["launch_id"].rpartition("-a")
            attempts[base] = max(attempts.get(base, 0), int(a))
    done = completed_launches(old, ctx.design.requests)
    reused: set[str] = set()
    if same_file:  # resuming into the run's own directory: its rows are already in the file, keep them as they are
        writer.rows.extend(old)
        return {launch_id.rpartition("-a")[0] for launch_id in done}, attempts
    for launch_id, group in done.items():
        for row in group:
            writer.write({**row, "reused_from": str(ctx.resume)})
        reused.add(launch_id.rpartition("-a")[0])
    writer.sync()
    return reused, attempts


def _previous_verdict(ctx: RunContext) -> dict[str, Any] | None:
    """The verdict record of the run being resumed, if it already had one."""
    rec = read_json_object(ctx.resume / "verdict.json") if ctx.resume is not None else None
    return rec if rec is not None and rec.get("kind") == "verdict" else None


def _launches_per_condition(rows: list[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in rows:
        if r["kind"] == "launch":
            out[str(r["condition"])] = out.get(str(r["condition"]), 0) + 1
    return out


def _attempts_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for r in rows:
        if r["kind"] == "launch":
            out[r["launch_id"]] = {"attempt": r.get("attempt", 1), "reused_from": r.get("reused_from")}
    return out


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
