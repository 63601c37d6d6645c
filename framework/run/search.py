"""The imperative shell of `python -m framework search`: explore with Optuna launch by launch, write what was
explored, then confirm the winner on fresh launches through the normal run path.

Order of work:

1. resolve the command line through `run`'s precheck and its one resolver (`resolve_config(search=True)`): the
   search hypothesis, its grid (:func:`framework.analysis.search.grid_hypothesis`), the experiment and the backend,
   every check done before any server starts (a literal secret, the sim's coverage of the space: as for `run`);
2. explore (`Exploration`, a launch policy of :mod:`framework.run.session`): each Optuna trial is ONE launch (the
   unit), measured through the same session as `run` (its workers, sim profile, machine and redactor), so Optuna
   sees every launch's value (the launch-level noise), `launches_per_candidate`
   of them per candidate; a launch that fails is told as a failed trial with its failure class, and
   configurations that crashed (or carry a value that crashed every configuration with it) are not launched
   again; the last `budget.refine` launches race the contenders the leader has not beaten beyond the noise,
   or, with `select:`, the best `select.finalists` go to fresh launches under Kim & Nelson's fully sequential
   selection (framework.stats.ranking), which chooses the best or one within `select.delta` of it with
   probability at least 1 - alpha whenever the best leads by delta;
3. write search.json (front, chosen, launches spent, what the grid would have cost, the naive and the
   selection-corrected estimates) and an `exploration` record in the ledger, marked exploratory;
4. register the confirmatory hypothesis (the winner beats the reference by the declared min_effect), then run
   it on fresh launches in randomized blocks; its verdict record names the search (id and search.json's sha256),
   which `audit` checks.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Iterator

import yaml
from omegaconf import DictConfig
from rich.console import Console
from rich.markup import escape

from framework.analysis import search as an
from framework.analysis.ruleset import LATEST, RULESETS
from framework.core import design as design_mod
from framework.core.hashing import json_finite, sha256_file
from framework.core.search import MAX_LAUNCHES_PER_POINT
from framework.core.spec import Experiment, Hypothesis
from framework.core.trials import Trials
from framework.errors import NoWinner, StorageError
from framework.execution.backends import BackendSettings
from framework.execution.launcher import install_signal_handlers
from framework.present import format as fmt
from framework.present.format import sig
from framework.present.progress import RunProgress, make_console
from framework.records import environment, ledger, registration
from framework.records.models import ExplorationRecord, HypothesisRef, TrialsRef
from framework.records.registration import analysis_settings
from framework.run.compose import compose
from framework.run.resolve import Resolved, precheck_one
from framework.run.session import Launched, Session, Step, drive, open_context
from framework.run.writer import now_iso
from framework.stats import capacity as capacity_mod
from framework.stats import pareto, ranking, selection

MAX_ASKS_PER_LAUNCH = 50  # suggestions Optuna may make per launch of budget before the space counts as exhausted


@dataclass
class SearchSetup:
    """A search, resolved and checked by the one resolver (`resolve_config(search=True)`): nothing has started."""

    cfg: DictConfig
    resolved: Resolved
    overrides: list[str]
    ledger: Path

    @property
    def hypothesis(self) -> Hypothesis:
        return self.resolved.hypothesis

    @property
    def hypothesis_path(self) -> Path:
        return self.resolved.hypothesis_path

    @property
    def grid(self) -> Hypothesis:
        assert self.resolved.grid is not None
        return self.resolved.grid

    @property
    def experiment(self) -> Experiment:
        return self.resolved.experiment

    @property
    def backend(self) -> BackendSettings:
        return self.resolved.backend

    @property
    def coverage(self) -> dict[str, Any] | None:
        return self.resolved.coverage

    @property
    def report(self) -> bool:
        return bool(self.cfg.get("report", True))


def resolve_search(overrides: list[str], cwd: Path) -> SearchSetup:
    """The search of `overrides` (hypothesis=NAME and run config keys), checked before any server starts: the
    command line's secrets, then the one resolver, as `run` does (framework.run.resolve.precheck)."""
    cfg, resolved = precheck_one(overrides, "search", search=True)
    ledger_path = Path(cfg.ledger)
    return SearchSetup(cfg=cfg, resolved=resolved, overrides=overrides,
                       ledger=ledger_path if ledger_path.is_absolute() else cwd / ledger_path)


def default_run_dir(h: Hypothesis, cwd: Path) -> Path:
    now = datetime.now()
    return cwd / "outputs" / now.strftime("%Y-%m-%d") / f"{now.strftime('%H-%M-%S')}-{h.name}-search"


# --------------------------------------------------------------------------- exploration


@dataclass
class Explored:
    """What exploration left: the candidates, Optuna's trials (one per launch or avoided suggestion), the cost."""

    candidates: dict[int, an.Candidate]
    trials: list[dict[str, Any]] = field(default_factory=list)
    launches: int = 0
    avoided: int = 0
    gpu_hours: float = 0.0
    stop_reason: str = ""
    select_ids: set[str] = field(default_factory=set)  # the selection's fresh launches (none of the exploration's)
    selection: dict[str, Any] | None = None  # KN's outcome (search.json's `selection`), with `select:`


def _optuna() -> Any:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    return optuna


def _distributions(optuna: Any, s: Any) -> dict[str, Any]:
    """Integer ranges as integers (TPE models their order), everything else as categories of level names."""
    out = {}
    for name, dim in s.space.items():
        if dim.range is not None:
            out[name] = optuna.distributions.IntDistribution(dim.range.low, dim.range.high, step=dim.range.step)
        else:
            out[name] = optuna.distributions.CategoricalDistribution([dim.level_name(v) for v in dim.all_values()])
    return out


def _params(s: Any, point: dict[str, str]) -> dict[str, Any]:
    return {n: int(point[n]) if s.space[n].range is not None else point[n] for n in s.space}


def _point(s: Any, params: dict[str, Any]) -> dict[str, str]:
    return {n: str(params[n]) for n in s.space}


def _sampler(optuna: Any, s: Any, seed: int) -> Any:
    if s.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    startup = s.startup_trials or max(2, min(10, s.budget.launches // (2 * s.launches_per_candidate)))
    # Optuna 5 reads constraints set on the trial (Trial.set_constraint); Optuna 4 asks a function for them
    constraints = (lambda t: t.user_attrs.get("constraints", [1.0] * len(s.goal.constraints))) \
        if s.goal.constraints and not hasattr(optuna.trial.Trial, "set_constraint") else None
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup * s.launches_per_candidate,
                                      multivariate=True, constraints_func=constraints)


class Exploration:
    """Search's launch policy (framework.run.session.LaunchPolicy): each Optuna trial is one launch of the grid,
    chosen until the launch (or GPU-hour) budget is spent; the last `budget.refine` launches race the
    contenders the leader has not beaten. What each launch measured is read from the session's `Trials`."""

    def __init__(self, setup: SearchSetup, progress: RunProgress) -> None:
        self.optuna = _optuna()
        self.setup, self.progress = setup, progress
        self.h, self.s = setup.hypothesis, setup.hypothesis.search
        assert self.s is not None
        self.seed = an.search_seed(self.h)
        self.rules = RULESETS[LATEST]  # one ruleset for the candidates and for what Optuna is told
        self.objectives = self.s.goal.objectives()
        self.study = self.optuna.create_study(directions=[o.direction for o in self.objectives],
                                              sampler=_sampler(self.optuna, self.s, self.seed))
        self.dists = _distributions(self.optuna, self.s)
        self.out = Explored(candidates={})
        self.conds = {c.index: c for c in design_mod.conditions(setup.grid)}
        self.index_of = {json.dumps(c.levels, sort_keys=True): c.index for c in self.conds.values()}
        self._choices = self._choose()
        self._pending: tuple[dict[str, str], str, Any, design_mod.PlannedLaunch] | None = None

    def next(self, trials: Trials) -> list[Step]:
        s, out = self.s, self.out
        assert s is not None
        try:
            point, phase, trial = next(self._choices)
        except StopIteration:
            return []
        if trial is None:  # one launch of `point` as one Optuna trial: one with its parameters
            self.study.enqueue_trial(_params(s, point), skip_if_exists=False)
            trial = self.study.ask(self.dists)
        cond = self.conds[self.index_of[json.dumps(point, sort_keys=True)]]
        cand = out.candidates.get(cond.index)
        replicate = (len(cand.launch_ids) + cand.failed) if cand else 0
        planned = design_mod.PlannedLaunch(cond, replicate, out.launches,
                                           design_mod.launch_seed(self.seed, cond.index, replicate))
        self._pending = (point, phase, trial, planned)
        return [Step(planned, out.launches, s.budget.launches + s.select_launches())]

    def observe(self, step: Step, launched: Launched, trials: Trials) -> None:
        """Tell Optuna what the launch measured (or how it failed), and update the candidates."""
        assert self._pending is not None and self.s is not None
        point, phase, trial, planned = self._pending
        h, s, out, optuna = self.h, self.s, self.out, self.optuna
        out.launches += 1
        out.gpu_hours += launched.seconds * self.setup.experiment.tp_size / 3600
        out.candidates = an.candidates(h, trials.rows, self.rules)
        launch_id = launched.launch_id
        values = [an.launch_value(h, trials.rows, launch_id, o.metric, self.rules) for o in self.objectives]
        own = launched.trials
        row = (own.of_kind("launch") or [{}])[-1]
        end = (own.of_kind("launch_end") or [{}])[-1]
        failed = not row.get("ok") or end.get("ok") is False
        failure = (row.get("failure_class") or end.get("failure_class") or "failed") if failed else None
        record = {"number": trial.number, "phase": phase, "launch_id": launch_id, "point": point,
                  "seed": planned.seed}
        if phase == "select":
            out.select_ids.add(launch_id)
        if failure or any(v is None for v in values):
            cls = failure or "no_data"
            trial.set_user_attr("failure_class", cls)
            trial.set_user_attr("failure", str(row.get("error") or end.get("error") or "measured nothing"))
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
            record.update(state="failed", failure_class=cls)
            self.progress.note(f"search: {an.describe(point)}: failed ({cls}); told to Optuna as a failed trial")
        else:
            cand = out.candidates[planned.condition.index]
            consts = [con.slack(v) for con in s.goal.parsed_constraints()
                      if (v := an.launch_value(h, trials.rows, launch_id, con.metric, self.rules)) is not None]
            if len(consts) < len(s.goal.constraints):
                consts += [1.0] * (len(s.goal.constraints) - len(consts))
            trial.set_user_attr("constraints", consts)
            if hasattr(trial, "set_constraint"):
                for con, slack in zip(s.goal.constraints, consts, strict=True):
                    trial.set_constraint(con, slack)
            trial.set_user_attr("launch_id", launch_id)
            self.study.tell(trial, values)
            record.update(state="complete", values=dict(zip([o.metric for o in self.objectives], values, strict=True)),
                          constraints=consts)
            best = an.ranked(out.candidates, s)
            lead = f"; leader {an.describe(best[0].point)}: {sig(best[0].mean(s.goal.metric))}" if best else ""
            most = s.budget.launches + s.select_launches()
            self.progress.note(f"search: launch {out.launches}/{most} ({phase}) {an.describe(point)}: "
                               f"{s.goal.metric} {sig(values[0])} (candidate {sig(cand.mean(s.goal.metric))} over "
                               f"{cand.launches} launches){lead}")
        out.trials.append(record)

    def _choose(self) -> Iterator[tuple[dict[str, str], str, Any]]:
        """The points to launch, one at a time, as (point, phase, the Optuna trial that suggested it or None)."""
        optuna, study, s, out = self.optuna, self.study, self.s, self.out
        assert s is not None
        explore_budget = s.explore_launches()
        asks = 0
        exhausted = ""

        def budget_left(limit: int) -> bool:
            if out.launches >= limit:
                return False
            if s.budget.gpu_hours is not None and out.gpu_hours >= s.budget.gpu_hours:
                out.stop_reason = f"GPU-hour budget spent ({out.gpu_hours:.3g} of {s.budget.gpu_hours:g})"
                return False
            return True

        # the reference first: the estimates against it need it, and Optuna starts from a known point
        pending: list[dict[str, str]] = [s.reference_point()] * s.launches_per_candidate
        while budget_left(explore_budget):
            suggested = None
            if pending:
                point = pending.pop(0)
            else:
                asks += 1
                if asks > MAX_ASKS_PER_LAUNCH * s.budget.launches:
                    exhausted = "Optuna's suggestions were all measured already or predicted to crash; "
                    break
                trial = study.ask(self.dists)
                point = _point(s, trial.params)
                why = an.predicted_crash(point, out.candidates, an.crash_model(out.candidates))
                if why is not None:  # learned: not launched, told as failed with the class it would fail with
                    trial.set_user_attr("avoided", why)
                    study.tell(trial, state=optuna.trial.TrialState.FAIL)
                    out.avoided += 1
                    out.trials.append({"number": trial.number, "phase": "avoided", "point": point,
                                       "state": "avoided", "reason": why})
                    continue
                cand = out.candidates.get(self.index_of[json.dumps(point, sort_keys=True)])
                if cand is not None and cand.launches + cand.failed >= s.launches_per_candidate:
                    # measured already: more launches of it are the racing's to give, exploration looks elsewhere
                    trial.set_user_attr("duplicate", True)
                    study.tell(trial, state=optuna.trial.TrialState.FAIL)
                    out.trials.append({"number": trial.number, "phase": "duplicate", "point": point,
                                       "state": "skipped"})
                    if len(out.candidates) >= len(self.conds):
                        exhausted = "every point of the grid measured; "
                        break
                    continue
                suggested = trial  # its first launch; the others are trials with the same parameters
                pending = [point] * (s.launches_per_candidate - 1)
            if suggested is None and an.predicted_crash(point, out.candidates, {}) is not None:
                pending = []  # it crashed at start-up: its other launches would too
                continue
            yield point, "explore", suggested
        if not out.stop_reason and s.select is not None:
            yield from self._select(exhausted)
            return
        if not out.stop_reason:
            while budget_left(s.budget.launches):  # racing: the contenders the leader has not beaten get the rest
                contender = an.next_in_race(out.candidates, s)
                if contender is None or contender.launches + contender.failed >= max(MAX_LAUNCHES_PER_POINT,
                                                                                     s.launches_per_candidate):
                    break
                yield contender.point, "refine", None
            out.stop_reason = out.stop_reason or (f"{exhausted}launch budget spent ({out.launches} of "
                                                  f"{s.budget.launches})" if out.launches >= s.budget.launches else
                                                  f"{exhausted}no contender left to race after {out.launches} "
                                                  "launches")


    def _select(self, exhausted: str) -> Iterator[tuple[dict[str, str], str, Any]]:
        """The final stage: KN among the exploration's best `select.finalists` on fresh launches, one round of the
        survivors at a time, until KN stops (one survivor, its last stage, or `select.max_launches`)."""
        s, out = self.s, self.out
        assert s is not None and s.select is not None
        sel = s.select
        alpha = sel.alpha if sel.alpha is not None else self.h.design.alpha
        finalists = an.ranked(out.candidates, s, at_least=2)[:sel.finalists]
        names = [an.describe(c.point) for c in finalists]
        base = {"procedure": "KN (Kim & Nelson 2001)", "alpha": alpha, "delta": sel.delta, "first_stage":
                sel.first_stage, "max_launches": sel.max_launches, "finalists": names}
        explored_launches = out.launches
        if len(finalists) < 2:
            out.selection = {**base, "done": False, "best": names[0] if names else None,
                             "why": f"{len(finalists)} feasible candidate(s) with 2 launches: nothing to select among"}
            out.stop_reason = f"{exhausted}exploration spent {explored_launches} launches; no selection"
            return
        direction = "max" if s.goal.direction == "maximize" else "min"
        attempts = 0  # fresh launches asked; more than KN's cap allows only if some failed
        while True:
            cands = {c.index: out.candidates[c.index] for c in finalists}
            fresh = {an.describe(c.point): [v for lid, v in zip(c.launch_ids, c.values.get(s.goal.metric) or [],
                                                                strict=False) if lid in out.select_ids]
                     for c in cands.values()}
            st = ranking.kn_select(fresh, alpha, sel.log_delta(), sel.first_stage, direction,
                                   max_stage_cap=sel.max_launches)
            guaranteed = st.done and "WITHOUT" not in st.why
            out.selection = {**base, **selection_summary(st, fresh), "guaranteed": guaranteed}
            if st.done:
                break
            if attempts >= sel.finalists * sel.max_launches:
                out.selection["why"] = (f"stopped after {attempts} fresh launches, some of which failed, before KN "
                                        f"finished: {st.why}")
                break
            for name in st.needs:
                attempts += 1
                yield next(c for c in finalists if an.describe(c.point) == name).point, "select", None
        out.stop_reason = (f"{exhausted}exploration spent {explored_launches} launches, the selection "
                           f"{out.launches - explored_launches} fresh ones: {out.selection['why']}")


def selection_summary(st: ranking.KNState, fresh: dict[str, list[float]]) -> dict[str, Any]:
    """search.json's account of KN: who went out at which stage, who was left, and which finalists could still be
    within delta of the selected one (the survivors, when KN stopped at its last stage or at the cap)."""
    return {"done": st.done, "best": st.best, "stage": st.stage, "max_stage": st.max_stage, "eta": st.eta,
            "h2": st.h2, "eliminated": st.eliminated, "survivors": st.survivors,
            "within_delta": [n for n in st.survivors if n != st.best] if st.done else [],
            "fresh_launches": {n: len(v) for n, v in fresh.items()}, "why": st.why}


# --------------------------------------------------------------------------- the summary


def summarize(setup: SearchSetup, explored: Explored, search_id: str) -> dict[str, Any]:
    """search.json's content: every candidate, the front, the chosen, the cost, the estimates."""
    h, s = setup.hypothesis, setup.hypothesis.search
    assert s is not None
    cands = explored.candidates
    ref_point = s.reference_point()
    ref = next((c for c in cands.values() if c.point == ref_point), None)
    eligible = {i: c for i, c in cands.items() if c.launches >= 2}
    ranking = an.ranked(eligible, s, at_least=2)
    chosen = ranking[:s.confirm.top]
    sel = explored.selection
    if sel and sel.get("best"):  # the selection's choice first, then the exploration's order
        best = next(c for c in ranking if an.describe(c.point) == sel["best"])
        chosen = [best, *[c for c in ranking if c is not best]][:s.confirm.top]
    direction = "max" if s.goal.direction == "maximize" else "min"
    alpha = h.design.alpha
    estimate: dict[str, Any] | None = None
    others = {an.describe(c.point): c.values[s.goal.metric] for c in ranking if c.point != ref_point}
    if ref is not None and ref.launches >= 2 and others and chosen and chosen[0].point != ref_point:
        # separate launch variances: the pooled one overshoots when a slow launch is in the data (statistics.md s11;
        # issue 35 measured it below the truth in 7 of 7 searches)
        w = selection.winner_estimate(others, ref.values[s.goal.metric], direction=direction, alpha=alpha,
                                      variance="separate")
        # the corrected estimate is for the argmax of the launches' geometric means; the search ranks by their
        # median, so it says whether the two picked the same candidate
        estimate = {"against": "reference", **asdict(w), "winner_is_chosen": w.winner == an.describe(chosen[0].point)}
    objectives = s.goal.objectives()
    front: dict[str, Any]
    if len(objectives) == 2 and len(eligible) >= 1:
        f = pareto.pareto_front(
            [pareto.Sample(an.describe(c.point), {o.metric: c.values[o.metric] for o in objectives})
             for c in eligible.values()], (objectives[0], objectives[1]), alpha=alpha)
        front = {"objectives": [o.model_dump() for o in objectives], **asdict(f)}
    else:  # one objective: the front is its best, with the interval of every measured candidate beside it
        front = {"objectives": [o.model_dump() for o in objectives],
                 "points": [{"name": an.describe(c.point), "feasible": an.feasible(c, s),
                             "estimate": asdict(pareto.point_estimate(s.goal.metric, c.values[s.goal.metric], alpha))}
                            for c in sorted(eligible.values(), key=lambda c: c.index)],
                 "best": [an.describe(c.point) for c in ranking[:1]]}
    capacity = []  # an SLO along a load dimension: the highest load meeting it, with a lower confidence bound
    for ladder in an.capacity_ladders(cands, s, chosen[0].point if chosen else ref_point):
        cap = capacity_mod.slo_capacity([capacity_mod.LoadLevel(load, vals) for load, vals in ladder["rungs"]],
                                        ladder["threshold"], ladder["op"], alpha=alpha)
        capacity.append({k: v for k, v in ladder.items() if k != "rungs"} | asdict(cap))
    return json_finite({
        "schema": "framework.search/1",
        "id": search_id,
        "hypothesis": h.name,
        "backend": setup.backend.name,
        "exploratory": True,
        "goal": s.goal.model_dump(),
        "space": {n: [d.level_name(v) for v in d.all_values()] for n, d in s.space.items()},
        "reference": ref_point,
        "launches_per_candidate": s.launches_per_candidate,
        "budget": s.budget.model_dump(),
        **({"budget_declared": setup.resolved.budget_declared} if setup.resolved.budget_declared is not None else {}),
        "launches_spent": explored.launches,
        "gpu_hours_spent": explored.gpu_hours,
        "grid_points": s.grid_size(),
        "grid_launches": s.grid_launches(),
        "candidates_launched": len(cands),
        "avoided_suggestions": explored.avoided,
        "crash_model": an.crash_model(cands),
        "stop_reason": explored.stop_reason,
        "chosen": [{"point": c.point, "index": c.index, "mean": c.mean(s.goal.metric), "launches": c.launches}
                   for c in chosen],
        "ranking": [an.describe(c.point) for c in ranking],
        "front": front,
        "estimate": estimate,
        "selection": sel,
        "capacity": capacity,
        "confirm": s.confirm.model_dump(),
        "candidates": [c.to_dict(s) for c in sorted(cands.values(), key=lambda c: c.index)],
        "trials": explored.trials,
        "coverage": setup.coverage,
    })


def _write_json(path: Path, data: dict[str, Any]) -> None:
    try:
        path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise StorageError(f"{path}: cannot write ({exc.strerror})") from None


# --------------------------------------------------------------------------- the whole search


def search(setup: SearchSetup, run_dir: Path, cwd: Path, console: Console | None = None) -> dict[str, Any]:
    """Explore, record the exploration, register the confirmation and run it; returns search.json's content
    with the confirmation's verdict record under `confirmation` (which search.json itself does not hold)."""
    from framework.run.runner import resolve as resolve_run
    from framework.run.runner import run as run_confirmation

    console = console or make_console()
    install_signal_handlers()
    h, s = setup.hypothesis, setup.hypothesis.search
    assert s is not None
    try:
        run_dir.mkdir(parents=True, exist_ok=False)
    except OSError as exc:
        raise StorageError(f"{run_dir}: cannot create the search directory ({exc.strerror or exc})") from None
    started = now_iso()
    search_id = hashlib.sha256(f"{h.name}/{sha256_file(setup.hypothesis_path)}/{started}".encode()).hexdigest()[:12]
    # the exploration launches the grid through the same door as its confirmation: workers, profile, secrets
    ctx = open_context(setup.cfg, setup.resolved, run_dir, cwd, hypothesis=setup.grid)
    for line in (setup.coverage or {}).get("unmodelled_varied") or []:
        console.print(escape(f"warning: sim.allow_unmodelled=true: the simulator does not model this: {line}"),
                      style="bold red", highlight=False)
    console.print(escape(f"search {search_id}: {h.name} on backend {setup.backend.name}: {s.grid_size()} points "
                         f"(a grid at {s.launches_per_candidate} launches each: {s.grid_launches()} launches); "
                         f"budget {s.budget.launches} launches"
                         + (f" and at most {s.select_launches()} fresh ones for the selection" if s.select else "")),
                  highlight=False)
    if setup.resolved.budget_declared is not None:
        console.print(escape(f"note: budget.launches {setup.resolved.budget_declared} is more than this space can "
                             f"use ({s.grid_size()} points x {max(MAX_LAUNCHES_PER_POINT, s.launches_per_candidate)} "
                             f"launches at most each): capped at {s.budget.launches}"), highlight=False)
    progress = RunProgress(console, f"search {h.name}", total_launches=s.budget.launches + s.select_launches(),
                           requests_per_launch=h.design.requests + h.design.warmup,
                           enabled=bool(setup.cfg.get("progress", True)) and console.is_terminal)
    session = Session(ctx)
    with session:
        policy = Exploration(setup, progress)
        with progress:
            drive(session, policy, progress)
    explored, writer = policy.out, session.writer
    assert writer is not None
    summary = summarize(setup, explored, search_id)
    if not summary["chosen"]:
        _write_json(run_dir / "search.json", summary)
        raise_no_winner(run_dir, explored)
    h_sha = sha256_file(setup.hypothesis_path)
    to_confirm = [c["point"] for c in summary["chosen"] if c["point"] != s.reference_point()]
    confirm_data: dict[str, Any] | None = None
    if to_confirm:
        seed = an.confirm_seed(h_sha, an.search_seed(h), earlier_searches(setup.ledger, h.name, h_sha))
        confirm_data = an.confirm_hypothesis(h, to_confirm, search_id, seed)
        confirm_path = run_dir / f"{confirm_data['name']}.yaml"
        summary["confirm_hypothesis"] = {"name": confirm_data["name"], "path": confirm_path.name}
    else:  # "the reference beats the reference" answers nothing, and at alpha it can come out supported by chance
        summary["confirmation_skipped"] = (f"the search chose its own reference ({an.describe(s.reference_point())})"
                                           ": no configuration of the space beat it, so there is nothing to confirm "
                                           "against it")
    _write_json(run_dir / "search.json", summary)
    search_sha = sha256_file(run_dir / "search.json")

    trials_path = run_dir / "trials.jsonl"
    ref = registration.hypothesis_ref(setup.hypothesis_path)
    exploration = ExplorationRecord(
        hypothesis=HypothesisRef(**ref.model_dump()), backend=setup.backend.name, search_id=search_id,
        search_json={"path": _relative(run_dir / "search.json", setup.ledger), "sha256": search_sha},
        trials=TrialsRef(path=_relative(trials_path, setup.ledger), sha256=sha256_file(trials_path),
                         rows=len(writer.rows), bytes=trials_path.stat().st_size),
        launches_spent=explored.launches, chosen=[c["point"] for c in summary["chosen"]],
        environment={"backend": setup.backend.name, **environment.machine()}, run_dir=str(run_dir),
        started=started, finished=now_iso())
    stored = ledger.append(setup.ledger, exploration)
    console.print(escape(f"exploration recorded (exploratory, no verdict): {stored['hash'][:12]} in {setup.ledger}"),
                  highlight=False)
    _print_summary(console, summary)
    if confirm_data is None:
        console.print(escape(f"search {search_id}: no confirmation: {summary['confirmation_skipped']}"),
                      highlight=False)
        if setup.report:
            _report(console, run_dir)
        ctx.redactor.scrub_tree(run_dir)
        return {**summary, "confirmation": None}

    # the confirmation: registered before any of its launches, then the normal run path on fresh launches
    confirm_path.write_text(yaml.safe_dump(confirm_data, sort_keys=False, allow_unicode=True), encoding="utf-8")
    keep = [o for o in setup.overrides if not o.split("=", 1)[0].lstrip("+").startswith(("hypothesis", "design."))]
    cfg: DictConfig = compose([*keep, f"hypothesis={confirm_path}", f"ledger={setup.ledger}"])
    confirm_dir = run_dir / "confirm"
    rctx = resolve_run(cfg, confirm_dir, cwd)
    reg_hash, _ = registration.check_or_amend(setup.ledger, confirm_path, analysis_settings(rctx.design), False)
    console.print(escape(f"confirmation registered before any new data: {confirm_data['name']} "
                         f"({reg_hash[:12]}): {confirm_data['statement']}"), highlight=False)
    rctx.extra["search"] = {"id": search_id, "sha256": search_sha, "path": _relative(run_dir / "search.json",
                                                                                       setup.ledger),
                            "exploration": stored["hash"]}
    record = run_confirmation(rctx, console)
    if setup.report:
        _report(console, run_dir)
    _print_confirmation(console, summary, record)
    ctx.redactor.scrub_tree(run_dir)  # the exploration's logs and the search report: no secret stays
    return {**summary, "confirmation": record}


def _report(console: Console, run_dir: Path) -> None:
    try:
        from framework.present.search_report import write_search_report

        write_search_report(run_dir)
    except Exception as exc:  # a report is a convenience; the verdict is in the ledger
        console.print(f"[yellow]search report not written: {escape(str(exc))}[/yellow]")


def earlier_searches(ledger_path: Path, name: str, sha256: str) -> int:
    """How many explorations of this hypothesis file the ledger holds: the search-run index its confirmation
    seed derives from (0 in a fresh directory, so the same command gives the same figures there)."""
    if not ledger_path.is_file():
        return 0
    return sum(1 for rec in ledger.read(ledger_path) if ledger.is_kind(rec, "exploration")
               and isinstance(rec.get("hypothesis"), dict) and rec["hypothesis"].get("name") == name
               and rec["hypothesis"].get("sha256") == sha256)


def raise_no_winner(run_dir: Path, explored: Explored) -> None:
    raise NoWinner(f"the search measured no candidate meeting the goal's constraints with 2 launches or more "
                      f"({explored.launches} launches spent: {explored.stop_reason}); nothing to confirm; "
                      f"see {run_dir / 'search.json'}")


def _relative(path: Path, ledger_path: Path) -> str:
    import os

    try:
        return os.path.relpath(path.resolve(), ledger_path.resolve().parent)
    except ValueError:
        return str(path.resolve())


def _print_summary(console: Console, summary: dict[str, Any]) -> None:
    chosen = "; ".join(an.describe(c["point"]) + f" ({sig(c['mean'])} over {c['launches']} launches)"
                       for c in summary["chosen"])
    console.print(escape(f"search {summary['id']}: {summary['launches_spent']} launches spent "
                         f"(a grid: {summary['grid_launches']}), {summary['candidates_launched']} candidates, "
                         f"{summary['avoided_suggestions']} suggestions avoided; chosen: {chosen}"), highlight=False)
    est = summary.get("estimate")
    if est:
        console.print(escape(
            f"  exploration's estimate against the reference: naive {sig(est['naive'])} "
            f"[{sig(est['naive_ci'][0])}, {sig(est['naive_ci'][1])}], selection-corrected {sig(est['corrected'])} "
            f"[{sig(est['corrected_ci'][0])}, {sig(est['corrected_ci'][1])}] (winner's curse; {est['n_candidates']} "
            f"candidates)"), highlight=False)
    sel = summary.get("selection")
    if sel:
        console.print(escape(f"  {selection_line(sel)}"), highlight=False)
    for cap in summary.get("capacity") or []:
        console.print(escape(f"  {fmt.capacity_line(cap)}"), highlight=False)


def selection_line(sel: dict[str, Any]) -> str:
    """What the selection says, in one line: the guarantee it holds, or why it does not."""
    pcs = f"P(correct selection) >= {1 - sel['alpha']:g} when the best leads by {sel['delta']:g}"
    if not sel.get("best") or not sel.get("done"):
        return f"selection ({sel['procedure']}): none: {sel['why']}"
    within = sel.get("within_delta") or []
    head = (f"selection ({sel['procedure']}, {pcs}) among {len(sel['finalists'])} finalists on "
            f"{sum(sel['fresh_launches'].values())} fresh launches: {sel['best']}")
    if not within:
        return f"{head}; no other finalist is within delta of it ({sel['why']})"
    could = "; ".join(within)
    return (f"{head}; within delta of it, or not separated: {could} ({sel['why']})" if sel.get("guaranteed")
            else f"{head}, but not separated from {could}: {sel['why']}")


def _print_confirmation(console: Console, summary: dict[str, Any], record: dict[str, Any]) -> None:
    preds = "; ".join(f"{p['id']}: {p['verdict']} (estimate {sig(p.get('estimate'))}, interval "
                      f"{p.get('ci')})" for p in record.get("predictions") or [])
    est = summary.get("estimate") or {}
    naive = f"; exploration: naive {sig(est['naive'])}, selection-corrected {sig(est['corrected'])}" if est else ""
    console.print(escape(f"search {summary['id']} confirmation: {record['verdict']} on fresh launches: "
                         f"{preds}{naive}"), highlight=False)
