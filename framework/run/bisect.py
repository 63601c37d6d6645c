"""The imperative shell of `python -m framework bisect`: locate the version that changed a metric, launch by
launch, under a registered error rate.

Order of work:

1. resolve the command line through the one resolver (`resolve_config(bisect=True)`): the hypothesis and its
   `bisect:` block, the versions as one factor (`analysis.bisect.version_hypothesis`), the experiment and the
   backend; for commits the repository and every commit are checked, for package versions every interpreter:
   all before anything starts (a problem is one line, exit 2);
2. register the hypothesis (the file, its bisect block and the analysis settings) before the first launch;
3. bisect (`Bisection`, a launch policy of framework.run.session): after every batch of launches the policy
   replays the whole bisection from the trials (`analysis.bisect.state_of`) and launches what it needs next;
   a commit is launched from a `git worktree` of it made under the run directory when first needed (the
   server imports that commit's code: PYTHONPATH, PYTHONSAFEPATH) and removed at the end;
4. write bisect.json and a `bisect` record in the ledger; `audit` replays it from the trials rows.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from rich.markup import escape

from framework.analysis import bisect as an
from framework.core import design as design_mod
from framework.core.hashing import json_finite, sha256_file
from framework.core.spec import Hypothesis
from framework.core.trials import Trials
from framework.errors import ConfigError, SpecError, StorageError
from framework.execution.launcher import install_signal_handlers
from framework.present.format import sig
from framework.present.progress import RunProgress, make_console
from framework.records import environment, ledger, registration
from framework.records.models import BisectRecord, HypothesisRef, TrialsRef
from framework.records.registration import analysis_settings
from framework.run.compose import compose
from framework.run.redaction import literal_secret
from framework.run.resolve import Resolved, load_pair, precheck_one
from framework.run.session import Launched, Session, Step, drive, open_context
from framework.run.writer import now_iso

GIT_TIMEOUT_S = 120


@dataclass
class BisectSetup:
    """A bisection, resolved and checked: nothing has started."""

    cfg: DictConfig
    resolved: Resolved
    ledger: Path
    repo: Path | None = None

    @property
    def hypothesis(self) -> Hypothesis:
        return self.resolved.hypothesis

    @property
    def report(self) -> bool:
        return bool(self.cfg.get("report", True))


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,  # noqa: S603, S607
                          timeout=GIT_TIMEOUT_S, check=False)


def check_versions(setup_h: Hypothesis, h_path: Path, cwd: Path) -> Path | None:
    """The repository and every commit (or every interpreter) exist: one line naming the version if not."""
    b = setup_h.bisect
    assert b is not None
    for i, v in enumerate(b.versions):
        if v.python is not None and not (Path(v.python).is_file() and os.access(v.python, os.X_OK)):
            raise SpecError(h_path, f"bisect.versions[{i}].python", f"{v.python} is not an executable file")
    if not b.commits:
        return None
    assert b.repo is not None
    repo = Path(b.repo) if Path(b.repo).is_absolute() else (h_path.parent / b.repo)
    if not (repo / ".git").exists() and not repo.name.endswith(".git"):
        repo = Path(b.repo) if Path(b.repo).is_absolute() else cwd / b.repo
    top = _git(repo, "rev-parse", "--git-dir") if repo.is_dir() else None
    if top is None or top.returncode != 0:
        raise SpecError(h_path, "bisect.repo", f"{b.repo} is not a git repository")
    for i, v in enumerate(b.versions):
        assert v.commit is not None
        got = _git(repo, "rev-parse", "--verify", "--quiet", f"{v.commit}^{{commit}}")
        if got.returncode != 0:
            raise SpecError(h_path, f"bisect.versions[{i}].commit", f"{v.commit!r} is not a commit of {b.repo}")
    return repo.resolve()


def resolve_bisect(overrides: list[str], cwd: Path) -> BisectSetup:
    """The bisection of `overrides` (hypothesis=NAME and run config keys), checked before any server starts."""
    secret = literal_secret(overrides)
    if secret:
        raise ConfigError("command line", *secret)
    first = compose([o for o in overrides if not o.startswith("-")])
    if not OmegaConf.is_missing(first, "hypothesis"):  # the versions in the words of the file, before the rest
        h, h_path, _ = load_pair(first)
        if h.bisect is not None:
            check_versions(h, h_path, cwd)
    cfg, resolved = precheck_one(overrides, "bisect", bisect=True)
    ledger_path = Path(cfg.ledger)
    repo = check_versions(resolved.hypothesis, resolved.hypothesis_path, cwd)
    return BisectSetup(cfg=cfg, resolved=resolved, repo=repo,
                       ledger=ledger_path if ledger_path.is_absolute() else cwd / ledger_path)


def default_run_dir(h: Hypothesis, cwd: Path) -> Path:
    now = datetime.now()
    return cwd / "outputs" / now.strftime("%Y-%m-%d") / f"{now.strftime('%H-%M-%S')}-{h.name}-bisect"


class Worktrees:
    """A `git worktree` per commit version, made when the bisection first launches it, removed at the end."""

    def __init__(self, repo: Path | None, h: Hypothesis, root: Path) -> None:
        self.repo, self.root = repo, root
        b = h.bisect
        assert b is not None
        self.commits = {v.name: v.commit for v in b.versions if v.commit is not None}
        self.made: list[Path] = []

    def path(self, name: str) -> str:
        return str(self.root / name)

    def paths(self) -> dict[str, str]:
        return {name: self.path(name) for name in self.commits}

    def ensure(self, name: str) -> None:
        if self.repo is None or name not in self.commits:
            return
        where = Path(self.path(name))
        if where.exists():
            return
        where.parent.mkdir(parents=True, exist_ok=True)
        got = _git(self.repo, "worktree", "add", "--detach", str(where), str(self.commits[name]))
        if got.returncode != 0:
            raise StorageError(f"git worktree add {where} {self.commits[name]}: {got.stderr.strip()[:300]}")
        self.made.append(where)

    def remove(self) -> None:
        assert self.repo is not None or not self.made
        for where in self.made:
            _git(self.repo, "worktree", "remove", "--force", str(where))  # type: ignore[arg-type]
        if self.made:
            _git(self.repo, "worktree", "prune")  # type: ignore[arg-type]
        self.made = []


@dataclass
class Spent:
    launches: int = 0
    gpu_hours: float = 0.0
    notes: list[str] = field(default_factory=list)


class Bisection:
    """The bisection's launch policy (framework.run.session.LaunchPolicy): replay the bisection from the
    session's trials, launch the versions it still needs (interleaved, one launch of each in turn)."""

    def __init__(self, setup: BisectSetup, progress: RunProgress, worktrees: Worktrees) -> None:
        self.h, self.setup, self.progress, self.worktrees = setup.hypothesis, setup, progress, worktrees
        b = self.h.bisect
        assert b is not None
        self.b = b
        self.conds = design_mod.conditions(an.version_hypothesis(self.h))
        self.spent = Spent()
        self.state: an.State | None = None
        self.seen = 0
        self.started = time.monotonic()
        self.stopped: str | None = None

    def next(self, trials: Trials) -> list[Step]:
        st = an.state_of(self.h, trials.rows)
        self.state = st
        self._note(st)
        if st.done:
            return []
        if self.b.max_seconds is not None and time.monotonic() - self.started >= self.b.max_seconds:
            self.stopped = f"the time budget max_seconds {self.b.max_seconds:g} is spent; undecided so far"
            self.progress.note(escape(f"bisect: {self.stopped}"))
            return []
        data = an.version_data(self.h, trials.rows)
        queues = []
        for v, target in sorted(st.need.items()):
            self.worktrees.ensure(self.b.versions[v].name)
            d = data[v]
            first = len(d.ids) + d.failed  # a replicate per attempt made so far: a new launch, never a retry
            # one launch of each version it needs per choice (interleaved; the replay is asked again after each
            # round), so a version that cannot start fails max_failures launches, not a whole look's worth
            queues.append([(v, first + i) for i in range(min(1, target - len(d.values)))])
        steps: list[Step] = []
        while any(queues):
            for q in queues:
                if q:
                    v, rep = q.pop(0)
                    cond = self.conds[v]
                    planned = design_mod.PlannedLaunch(cond, rep, self.spent.launches + len(steps),
                                                       design_mod.launch_seed(self.h.design.seed, v, rep))
                    steps.append(Step(planned, self.spent.launches + len(steps), self.spent.launches + len(steps)))
        return [Step(s.planned, s.place, self.spent.launches + len(steps)) for s in steps]

    def observe(self, step: Step, launched: Launched, trials: Trials) -> None:
        self.spent.launches += 1
        self.spent.gpu_hours += launched.seconds * self.setup.resolved.experiment.tp_size / 3600

    def _note(self, st: an.State) -> None:
        names = [v.name for v in self.b.versions]
        for c in st.compared[self.seen:]:
            if c.call is None:
                continue
            what = "ends" if c.role == "ends" else f"probe {names[c.version]}"
            self.progress.note(escape(f"bisect: {what}: {c.call} after {c.launches} launches (contrast "
                                      f"{c.estimate:+.4f}, interval [{c.lo:+.4f}, {c.hi:+.4f}])"))
            self.seen += 1


def _relative(path: Path, ledger_path: Path) -> str:
    try:
        return os.path.relpath(path.resolve(), ledger_path.resolve().parent)
    except ValueError:
        return str(path.resolve())


def bisect(setup: BisectSetup, run_dir: Path, cwd: Path) -> dict[str, Any]:
    """Register, bisect, record; return the bisect.json summary with the stored record's hash."""
    install_signal_handlers()
    console = make_console()
    h, b = setup.hypothesis, setup.hypothesis.bisect
    assert b is not None
    try:
        run_dir.mkdir(parents=True, exist_ok=False)
    except OSError as exc:
        raise StorageError(f"{run_dir}: cannot create the bisection directory ({exc.strerror or exc})") from None
    settings = {**analysis_settings(setup.resolved.design), "bisect": an.Settings.of(b, h.design.alpha).__dict__}
    reg_hash, _ = registration.check_or_amend(setup.ledger, setup.resolved.hypothesis_path, settings,
                                              bool(setup.cfg.get("allow_amend", False)))
    started = now_iso()
    bisect_id = hashlib.sha256(f"{h.name}/{reg_hash}/{started}".encode()).hexdigest()[:12]
    s = an.Settings.of(b, h.design.alpha)
    console.print(escape(f"bisect {bisect_id}: {h.name} ({reg_hash[:12]} registered before any launch): "
                         f"{len(b.versions)} versions ({b.kind()}) from {b.versions[0].name} (good) to "
                         f"{b.versions[-1].name} (bad); {h.metric}, threshold {b.threshold:g}, margin "
                         f"{b.equivalence_margin:g}; alpha {h.design.alpha:g} (ends {s.alphas[0]:.4g}, each of at "
                         f"most {s.probes} probes {s.alphas[1]:.4g})"), highlight=False)
    worktrees = Worktrees(setup.repo, h, (run_dir / "worktrees").resolve())  # git -C REPO reads paths from REPO
    tail = os.environ.get("PYTHONPATH")  # the worktree first, then what the framework itself imports from
    grid = an.version_hypothesis(h, {n: p + (os.pathsep + tail if tail else "") for n, p in worktrees.paths().items()})
    ctx = open_context(setup.cfg, setup.resolved, run_dir, cwd, hypothesis=grid)
    progress = RunProgress(console, f"bisect {h.name}", total_launches=(s.probes + 2) * b.launches,
                           requests_per_launch=h.design.requests + h.design.warmup,
                           enabled=bool(setup.cfg.get("progress", True)) and console.is_terminal)
    session = Session(ctx)
    try:
        with session:
            policy = Bisection(setup, progress, worktrees)
            with progress:
                drive(session, policy, progress)
    finally:
        worktrees.remove()
    writer = session.writer
    assert writer is not None
    rows = writer.rows
    st = an.state_of(h, rows)
    if policy.stopped is not None and not st.done:
        st.outcome, st.reason = "stopped", policy.stopped
    data = an.version_data(h, rows)
    summary = an.summary(h, st, data)
    per_launch = policy.spent.gpu_hours / policy.spent.launches if policy.spent.launches else 0.0
    summary.update(id=bisect_id, gpu_hours=policy.spent.gpu_hours,
                   linear_scan_gpu_hours=per_launch * summary["linear_scan_launches"])
    (run_dir / "bisect.json").write_text(json.dumps(json_finite(summary), indent=2, sort_keys=True) + "\n",
                                         encoding="utf-8")
    trials_path = run_dir / "trials.jsonl"
    ref = registration.hypothesis_ref(setup.resolved.hypothesis_path)
    record = BisectRecord(
        hypothesis=HypothesisRef(**ref.model_dump()), registration=reg_hash, backend=setup.resolved.backend.name,
        bisect_id=bisect_id, outcome=str(st.outcome), reason=st.reason, first_bad=summary.get("first_bad"),
        last_good=summary.get("last_good"), first_bad_commit=summary.get("first_bad_commit"),
        step=json_finite(summary.get("step")), probed=summary["probed"], launches_spent=summary["launches_spent"],
        linear_scan_launches=summary["linear_scan_launches"], gpu_hours=summary["gpu_hours"],
        linear_scan_gpu_hours=summary["linear_scan_gpu_hours"],
        bisect_json={"path": _relative(run_dir / "bisect.json", setup.ledger),
                     "sha256": sha256_file(run_dir / "bisect.json")},
        trials=TrialsRef(path=_relative(trials_path, setup.ledger), sha256=sha256_file(trials_path),
                         rows=len(rows), bytes=trials_path.stat().st_size),
        analysis=settings, environment={"backend": setup.resolved.backend.name, **environment.machine()},
        run_dir=str(run_dir), started=started, finished=now_iso())
    stored = ledger.append(setup.ledger, record)
    summary["record"] = stored["hash"]
    if setup.report:
        try:
            from framework.present.bisect_report import write_bisect_report

            write_bisect_report(run_dir)
        except Exception as exc:  # a report is a convenience; the record is in the ledger
            console.print(f"[yellow]bisect report not written: {escape(str(exc))}[/yellow]")
    console.print(escape(outcome_line(summary)), highlight=False)
    console.print(escape(f"bisect recorded: {stored['hash'][:12]} in {setup.ledger}"), highlight=False)
    ctx.redactor.scrub_tree(run_dir)
    return summary


def outcome_line(summary: dict[str, Any]) -> str:
    """One line: what the bisection found and what it spent."""
    spent = (f"{summary['launches_spent']} launches over {len(summary['probed'])} probes and the ends (a linear "
             f"scan at the same launches per version: {summary['linear_scan_launches']})")
    if summary["outcome"] == "named":
        step = summary["step"]
        lo, hi = step["ci"]
        mark = "" if step["one_step"] else ("; the step carries less than half of the ends' change: a drift or "
                                            "several changes, not one change point")
        return (f"bisect {summary['id']}: first bad version {summary['first_bad']} (last good "
                f"{summary['last_good']}): {summary['metric']} x{sig(step['ratio'])} "
                f"[{sig(lo)}, {sig(hi)}] ({step['level']:.0%} interval){mark}; {spent}")
    return f"bisect {summary['id']}: {summary['outcome']}: {summary['reason']}; {spent}"


def refuse_existing(run_dir: Path) -> None:
    if run_dir.exists():
        raise ConfigError("command line", "run_dir", f"{run_dir} exists; a bisection writes a new directory")
