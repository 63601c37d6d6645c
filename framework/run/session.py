"""The one door to launching: a composed, resolved config becomes a run context here, and every launch of
`run`, `search` and `plan`'s probe goes through a `Session`, so each honours the same settings.

A session holds what every launch needs and none should set up on its own: the secrets and their redactor
(`framework.run.redaction`), the machine and its slot of the design, the client's workers, the sim profile
(already in the resolved experiment), the trials file with its environment row, a resume's reused launches,
and one `Trials` index of every row written so far, kept up to date after each launch.

What to launch is a policy's choice (`LaunchPolicy`), and `drive` is the only loop:

- `next(trials)` reads the session's `Trials` and returns the next launches (`Step`s: a planned launch, and
  where it stands in the policy's count for the progress line), or `[]` when the policy is done;
- `observe(step, launched, trials)` sees what one launch left (its rows, its wall time) before the next
  choice; a policy writes no rows and starts no server itself.

The fixed/sequential design (`framework.run.measure.Blocks`), a search's exploration and racing
(`framework.run.search.Exploration`) and plan's noise probe (`framework.run.probe.NoiseProbe`) are policies.
A commit bisection is one more: its conditions are software versions; `next` returns the launches of the
version to measure next (as many as it needs), and `[]` once `trials` locate the change point.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from framework.core import design as design_mod
from framework.core.spec import Design, Hypothesis
from framework.core.trials import FORMAT, EnvironmentRow, Trials
from framework.execution.backends import BackendSettings
from framework.execution.launcher import raise_if_signalled
from framework.present.progress import RunProgress
from framework.records import environment
from framework.run import definition as definition_mod
from framework.run.context import RunContext
from framework.run.handoff import submitter_appends
from framework.run.launch import run_launch
from framework.run.redaction import Redactor, declared_names, ledger_salt, secret_values
from framework.run.resolve import Resolved, machine_slot, resume_dir, resume_dirs
from framework.run.writer import TrialsWriter, now_iso, reuse


def open_context(cfg: DictConfig, resolved: Resolved, run_dir: Path, cwd: Path | None = None, *,
                 hypothesis: Hypothesis | None = None, backend: BackendSettings | None = None,
                 design: Design | None = None) -> RunContext:
    """The run context of a resolved config (the only place one is made). Relative paths are taken from `cwd`
    (where the user ran); `hypothesis`, `backend` and `design` replace the resolved ones (a search launches its
    grid, the probe a noiseless sim)."""
    r = resolved
    ledger_path = Path(cfg.ledger)
    if cwd is not None and not ledger_path.is_absolute():
        ledger_path = cwd / ledger_path
    dirs = resume_dirs(cfg.get("resume"))
    resume = resume_dir(dirs[0], run_dir) if dirs else None
    hydra_cfg = HydraConfig.get() if HydraConfig.initialized() else None
    return RunContext(
        hypothesis=hypothesis or r.hypothesis, hypothesis_path=r.hypothesis_path, experiment=r.experiment,
        backend=backend or r.backend, design=design or r.design, ledger=ledger_path, run_dir=run_dir,
        config=OmegaConf.to_container(cfg, resolve=True),  # type: ignore[arg-type]
        resume=resume, resume_also=[resume_dir(p, run_dir) for p in dirs[1:]],
        allow_amend=bool(cfg.get("allow_amend", False)), sim_coverage=r.coverage, client_workers=r.client_workers,
        progress=bool(cfg.get("progress", True)) and sys.stdout.isatty(), report=bool(cfg.get("report", True)),
        ledger_writer="submitter" if submitter_appends(hydra_cfg) else "job",
        machine=environment.machine_identity((cfg.get("machine") or {}).get("label")),
        machine_slot=machine_slot(cfg, r.design),
        definition=definition_mod.in_force(r.hypothesis_path, r.experiment, design or r.design),
    )


@dataclass(frozen=True)
class Step:
    """One launch a policy chose: the plan, and its place in the policy's count ("launch place+1/of")."""

    planned: design_mod.PlannedLaunch
    place: int
    of: int


@dataclass(frozen=True)
class Launched:
    """What one launch left: its id, the rows it wrote (typed by kind in the session's `Trials`), its wall time."""

    launch_id: str
    rows: list[dict[str, Any]]
    seconds: float

    @property
    def trials(self) -> Trials:
        """Its rows by kind; `.launches`, `.requests` and `.typed(kind)` parse them into their row models."""
        return Trials(self.rows)


class LaunchPolicy(Protocol):
    """Chooses launches from the session's `Trials`; never launches, writes rows or records a verdict itself."""

    def next(self, trials: Trials) -> list[Step]:
        """The next launches, in order, from what `trials` shows so far; `[]` when the policy is done."""
        ...

    def observe(self, step: Step, launched: Launched, trials: Trials) -> None:
        """What one launch left, before the next choice."""
        ...


class Session:
    """The launches of one run directory: its secrets, trials file, reused launches and `Trials` index."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.writer: TrialsWriter | None = None
        self.trials = Trials([])
        self.reused: set[str] = set()
        self.attempts: dict[str, int] = {}

    def secure(self) -> None:
        """The redactor of the config's secrets (salted per ledger), the config and `.hydra/` scrubbed with it:
        before any row is written or any server started."""
        secrets = tuple(secret_values(self.ctx.config.get("backend") or {},
                                      declared_names(self.ctx.config.get("secret_env"))))
        if secrets:
            self.ctx.redactor = Redactor(secrets, ledger_salt(self.ctx.ledger))
            self.ctx.config = self.ctx.redactor.scrub(self.ctx.config)
            self.ctx.redactor.scrub_tree(self.ctx.run_dir / ".hydra")  # a key set in a config file

    def open(self) -> Session:
        """The trials file, a resume's complete launches copied in (only those of the definition in force, none
        of a search's exploration: `framework.run.definition.vet_resume`), and the environment row."""
        self.secure()
        ctx = self.ctx
        if ctx.resume is not None and ctx.definition is not None:
            definition_mod.vet_resume([ctx.resume, *ctx.resume_also], ctx.definition, name=ctx.hypothesis.name,
                                      ledger_path=ctx.ledger, requests_n=ctx.design.requests, run_dir=ctx.run_dir,
                                      carry=definition_mod.carried(ctx.config.get("resume_carry")))
        self.writer = TrialsWriter(self.ctx.run_dir / "trials.jsonl", self.ctx.redactor)
        try:
            self.reused, self.attempts = reuse(self.ctx, self.writer)
            write_environment(self.writer, self.ctx.backend.name, (self.ctx.config.get("machine") or {}).get("label"))
        except BaseException:
            self.writer.close()
            raise
        self._index()
        return self

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()

    def __enter__(self) -> Session:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def rows(self) -> list[dict[str, Any]]:
        return self.writer.rows if self.writer is not None else []

    def _index(self) -> None:
        self.trials = Trials(self.rows)

    def mine(self, planned: design_mod.PlannedLaunch) -> bool:
        """Whether this machine (its `machine.slot` of design.machines) measures the planned launch."""
        slot = design_mod.machine_slot(planned.block, self.ctx.design.machines)
        return self.ctx.machine_slot is None or slot == self.ctx.machine_slot

    def launch(self, planned: design_mod.PlannedLaunch, progress: RunProgress) -> Launched:
        """Run one planned launch (its next attempt) and return the rows it wrote."""
        assert self.writer is not None, "launch before open"
        attempt = self.attempts.get(planned.launch_id, 0) + 1
        self.attempts[planned.launch_id] = attempt
        before, started = len(self.writer.rows), time.monotonic()
        try:
            run_launch(self.ctx, planned, attempt, self.writer, progress)
        finally:
            self._index()
        return Launched(f"{planned.launch_id}-a{attempt}", self.writer.rows[before:], time.monotonic() - started)


def drive(session: Session, policy: LaunchPolicy, progress: RunProgress) -> None:
    """The one launch loop: ask the policy, launch what it chose (skipping what a resume reused and another
    machine's slot), tell it what each launch left; until it chooses nothing."""
    while True:
        raise_if_signalled()  # a stop signal whose exception something swallowed: no further choice
        steps = policy.next(session.trials)
        if not steps:
            return
        for step in steps:
            planned = step.planned
            if planned.launch_id in session.reused:
                progress.launch_reused(planned.condition)
                continue
            if not session.mine(planned):
                continue  # another machine's block (machine.slot): its run, or a resume there, measures it
            raise_if_signalled()
            progress.launch_started(planned.condition, step.place, step.of)
            launched = session.launch(planned, progress)
            progress.launch_done()
            policy.observe(step, launched, session.trials)


def write_environment(writer: TrialsWriter, backend: str, label: str | None = None) -> None:
    """The trials' `environment` row (where this run launches its servers), before its first launch; a resume
    into the run's own directory on the same machine finds it there already and writes nothing."""
    here = {"backend": backend, **environment.machine(label)}
    known = Trials(writer.rows).of_kind("environment")
    last = known[-1] if known else None
    if last is None or any(last.get(k) != v for k, v in here.items()):
        writer.write(EnvironmentRow(format=FORMAT, written=now_iso(), **here).to_json())
