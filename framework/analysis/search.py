"""A search's pure parts: its space as a grid of conditions, what each candidate's launches measured, which
configurations crash, which candidate wins, and the confirmatory hypothesis its winner is registered as.

The shell (:mod:`framework.run.search`) launches and asks Optuna; everything here is a function of the
hypothesis and the trials rows, so the search's summary (search.json) can be recomputed from its trials.
A candidate is a point of the grid, that is a condition of :func:`grid_hypothesis`; its value is per
launch (the unit), and every statistic over candidates works on the launches' logs.
"""

from __future__ import annotations

import hashlib
import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from framework.analysis.rows import group_rows
from framework.analysis.ruleset import RuleSet
from framework.core.search import Dimension, SearchBlock
from framework.core.spec import Factor, Hypothesis

CRASH_EVIDENCE = 2  # start-up failures sharing one value (and no start with it) before the value is avoided


def grid_hypothesis(h: Hypothesis) -> Hypothesis:
    """The space as a full-factorial hypothesis: a factor per dimension, a level per value, the reference as
    each factor's reference. Its conditions are the grid's points in `SearchBlock.points` order, and the sim's
    coverage check and the run path's launch see a candidate exactly as they see a condition."""
    s = _block(h)
    factors = {name: Factor.model_validate({
        "reference": dim.level_name(s.reference[name]),
        "levels": {dim.level_name(v): dim.level(v) for v in dim.all_values()},
    }) for name, dim in s.space.items()}
    return h.model_copy(update={"factors": factors, "predictions": []})


def _block(h: Hypothesis) -> SearchBlock:
    if h.search is None:
        raise ValueError(f"hypothesis {h.name} has no search block")
    return h.search


def metrics_of(s: SearchBlock) -> list[str]:
    """Every metric a candidate is measured on: the objectives, then the constrained ones."""
    out: list[str] = []
    for m in [o.metric for o in s.goal.objectives()] + [c.metric for c in s.goal.parsed_constraints()]:
        if m not in out:
            out.append(m)
    return out


@dataclass
class Candidate:
    """One point of the grid and what its launches measured (per launch, each metric's launch value)."""

    index: int
    point: dict[str, str]
    launch_ids: list[str] = field(default_factory=list)
    values: dict[str, list[float]] = field(default_factory=dict)  # metric -> per-launch values, launch order
    failed: int = 0
    failure_classes: dict[str, int] = field(default_factory=dict)
    failure: str | None = None
    started: int = 0  # launches whose server started (failed ones included when they failed while measured)

    @property
    def launches(self) -> int:
        """Launches that measured the goal's metric."""
        return len(next(iter(self.values.values()), []))

    def log_mean(self, metric: str) -> float | None:
        vals = self.values.get(metric) or []
        return statistics.fmean(math.log(v) for v in vals) if vals else None

    def mean(self, metric: str) -> float | None:
        """The geometric mean over launches (the scale every comparison works on)."""
        lm = self.log_mean(metric)
        return None if lm is None else math.exp(lm)

    def log_sd(self, metric: str) -> float | None:
        vals = self.values.get(metric) or []
        return statistics.stdev(math.log(v) for v in vals) if len(vals) >= 2 else None

    def to_dict(self, s: SearchBlock) -> dict[str, Any]:
        out = asdict(self)
        out["metrics"] = {m: {"mean": self.mean(m), "log_sd_between_launches": self.log_sd(m),
                              "launches": len(self.values.get(m) or [])} for m in metrics_of(s)}
        out["feasible"] = feasible(self, s)
        return out


def candidates(h: Hypothesis, rows: list[dict[str, Any]], ruleset: RuleSet | None = None) -> dict[int, Candidate]:
    """Every candidate that was launched, by grid index, from the search's trials rows (under `ruleset`, the latest
    unless given: what a launch's value is depends on it, e.g. ratio_rates and field_decode)."""
    s = _block(h)
    grid = grid_hypothesis(h)
    out: dict[int, Candidate] = {}
    for metric in metrics_of(s):
        grouped = group_rows(grid.model_copy(update={"metric": metric}), rows, ruleset)
        for index, d in grouped.data.items():
            if not d.launch_rows:
                continue
            cand = out.setdefault(index, Candidate(index, dict(d.cond.levels)))
            ids, means = d.means()
            cand.values[metric] = [float(v) for v in means]
            if metric == s.goal.metric:
                cand.launch_ids = ids
                cand.failed = sum(1 for r in d.launch_rows if not r.get("ok"))
                cand.started = sum(1 for r in d.launch_rows if r.get("ok") or r.get("failed_while_measured"))
                for r in d.launch_rows:
                    if not r.get("ok"):
                        cls = str(r.get("failure_class") or "unknown")
                        cand.failure_classes[cls] = cand.failure_classes.get(cls, 0) + 1
                        cand.failure = cand.failure or str(r.get("error") or "").strip() or None
    return out


def launch_value(h: Hypothesis, rows: list[dict[str, Any]], launch_id: str, metric: str,
                 ruleset: RuleSet | None = None) -> float | None:
    """One launch's value of `metric` (None when it failed or measured nothing): what Optuna is told, under the
    same `ruleset` as `candidates` so that Optuna and the ranking see one value per launch."""
    grid = grid_hypothesis(h).model_copy(update={"metric": metric})
    for d in group_rows(grid, rows, ruleset).data.values():
        ids, means = d.means()
        if launch_id in ids:
            return float(means[ids.index(launch_id)])
    return None


def feasible(c: Candidate, s: SearchBlock) -> bool | None:
    """Whether the candidate's mean over launches meets every constraint (None: not measured)."""
    if not c.launches:
        return None
    for con in s.goal.parsed_constraints():
        vals = c.values.get(con.metric) or []
        if not vals or con.slack(statistics.fmean(vals)) > 0:
            return False
    return True


def log_median(c: Candidate, metric: str) -> float | None:
    """The median of the candidate's launch logs: what the search ranks by, so that one slow launch (a rig's
    occasional bad start) does not decide which configuration is confirmed."""
    vals = c.values.get(metric) or []
    return statistics.median(math.log(v) for v in vals) if vals else None


def ranked(cands: dict[int, Candidate], s: SearchBlock, at_least: int = 1) -> list[Candidate]:
    """Feasible candidates with `at_least` launches, best first by their launches' median in the goal's metric
    (more launches, then grid order, on ties)."""
    sign = -1.0 if s.goal.direction == "maximize" else 1.0
    ok = [c for c in cands.values() if c.launches >= max(1, at_least) and feasible(c, s)]
    return sorted(ok, key=lambda c: (sign * (log_median(c, s.goal.metric) or 0.0), -c.launches, c.index))


RACE_Z = 1.645  # a contender stays in the race until the leader beats it at one-sided 5%


def next_in_race(cands: dict[int, Candidate], s: SearchBlock) -> Candidate | None:
    """Which candidate the next refine launch goes to: of those the leader has not beaten beyond the noise (the
    pooled between-launch sd of every candidate), the one with the fewest launches (racing, as F-race)."""
    metric = s.goal.metric
    pool = [c for c in cands.values() if c.launches >= 2]
    df = sum(c.launches - 1 for c in pool)
    if not df:
        return None
    var = sum((c.launches - 1) * (c.log_sd(metric) or 0.0) ** 2 for c in pool) / df
    sd = max(math.sqrt(var), 1e-6)
    order = ranked(cands, s)
    if not order:
        return None
    lead = order[0]
    sign = 1.0 if s.goal.direction == "maximize" else -1.0
    top = log_median(lead, metric) or 0.0

    def behind(c: Candidate) -> float:
        return sign * (top - (log_median(c, metric) or 0.0))

    contenders = [c for c in order if behind(c) <= RACE_Z * sd * math.sqrt(1 / lead.launches + 1 / c.launches)]
    if len(contenders) < 2:  # the leader alone: nothing left to race (more launches of it would separate nothing)
        return None
    return min(contenders, key=lambda c: (c.launches, behind(c), c.index))


# --------------------------------------------------------------------------- crashes


def crash_model(cands: dict[int, Candidate]) -> dict[str, dict[str, str]]:
    """Values that make a configuration crash, learned from start-up failures: {dimension: {level: class}}.

    A value is avoided once `CRASH_EVIDENCE` candidates carrying it failed every launch at start-up with one
    failure class and no candidate carrying it started. (A failure while measured is a launch that started:
    it is data about that configuration, not about the value.)
    """
    crashed = [c for c in cands.values() if c.failed and not c.started]
    started = [c for c in cands.values() if c.started]
    out: dict[str, dict[str, str]] = {}
    dims = {d for c in cands.values() for d in c.point}
    for dim in sorted(dims):
        for level in sorted({c.point[dim] for c in crashed}):
            with_it = [c for c in crashed if c.point[dim] == level]
            classes = {cls for c in with_it for cls in c.failure_classes}
            if (len(with_it) >= CRASH_EVIDENCE and len(classes) == 1
                    and not any(c.point[dim] == level for c in started)):
                out.setdefault(dim, {})[level] = next(iter(classes))
    return out


def predicted_crash(point: dict[str, str], cands: dict[int, Candidate],
                    model: dict[str, dict[str, str]]) -> str | None:
    """Why `point` need not be launched: it crashed at start-up before, or carries a value the model avoids."""
    for c in cands.values():
        if c.point == point and c.failed and not c.started:
            return f"crashed at start-up before ({', '.join(sorted(c.failure_classes))})"
    for dim, levels in model.items():
        if point.get(dim) in levels:
            return f"{dim}={point[dim]} crashed every configuration that had it ({levels[point[dim]]})"
    return None


# --------------------------------------------------------------------------- the confirmation


def search_seed(h: Hypothesis) -> int:
    s = _block(h)
    return s.seed if s.seed is not None else h.design.seed


def confirm_seed(hypothesis_sha256: str, seed: int, run_index: int) -> int:
    """The confirmation's design seed, derived from the hypothesis file's hash, the search's declared seed and
    how many searches of this hypothesis the ledger already holds -- never from the clock: the same command in a
    fresh directory gives the same launches and figures, a repeated search in one ledger gets fresh ones. Its
    launches are fresh against the exploration's (other server seeds; run/confirmation.py refuses a clash)."""
    salt = 0
    while True:  # never the exploration's own design seed (a clash of 1 in 2^31, refused by construction)
        key = f"{hypothesis_sha256}/{seed}/{run_index}/confirm" + (f"/{salt}" if salt else "")
        derived = int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big") & 0x7FFFFFFF
        if derived != seed:
            return derived
        salt += 1


def _merged_level(s: SearchBlock, point: dict[str, str]) -> dict[str, Any]:
    args: list[str] = []
    workload: dict[str, Any] = {}
    for name, dim in s.space.items():
        value = _value_of(dim, point[name])
        lv = dim.level(value)
        args += lv.get("server_args", [])
        workload.update(lv.get("workload", {}))
    return {k: v for k, v in (("server_args", args), ("workload", workload)) if v}


def _value_of(dim: Dimension, level: str) -> Any:
    return next(v for v in dim.all_values() if dim.level_name(v) == level)


def describe(point: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in point.items())


def confirm_hypothesis(h: Hypothesis, chosen: list[dict[str, str]], search_id: str, seed: int) -> dict[str, Any]:
    """The confirmatory hypothesis (as the data of a hypothesis file): the chosen configuration(s) against the
    reference, each predicted to beat it by at least the declared `confirm.min_effect`, at alpha / top each
    (Bonferroni over the few confirmed), on fresh launches in randomized blocks."""
    s = _block(h)
    c = s.confirm
    ref = s.reference_point()
    names = ["chosen"] if len(chosen) == 1 else [f"top{i + 1}" for i in range(len(chosen))]
    levels: dict[str, Any] = {"reference": _merged_level(s, ref)}
    for name, point in zip(names, chosen, strict=True):
        levels[name] = _merged_level(s, point)
    kind = "increase" if s.goal.direction == "maximize" else "decrease"
    better = "higher" if kind == "increase" else "lower"
    alpha = (c.alpha if c.alpha is not None else h.design.alpha) / len(chosen)
    d = h.design
    sequential = d.sequential.model_dump() if c.sequential is None else {**d.sequential.model_dump(),
                                                                           "enabled": c.sequential}
    if not sequential["enabled"]:
        sequential = {"enabled": False, "block": sequential["block"]}
    else:
        sequential = {k: v for k, v in sequential.items() if v is not None}
    which = "; ".join(f"{n}: {describe(p)}" for n, p in zip(names, chosen, strict=True))
    data: dict[str, Any] = {
        "name": f"{h.name}_confirm_{search_id}",
        "statement": (f"The configuration search {search_id} of {h.name} chose ({which}) gives {better} "
                      f"{s.goal.metric} than the reference ({describe(ref)}) by at least {c.min_effect:g}, "
                      f"on fresh launches."),
        "rationale": (f"Registered after the exploration and before any confirmatory launch; the minimum effect "
                      f"was declared in {h.name}'s search block before the search started"
                      + (f"; {len(chosen)} configurations are confirmed at alpha/{len(chosen)} each (Bonferroni)"
                         if len(chosen) > 1 else "") + "."),
        "experiment": h.experiment,
        "metric": s.goal.metric,
        "factors": {"config": {"reference": "reference", "levels": levels}},
        "predictions": [{"id": f"{n}_beats_reference", "kind": kind, "factor": "config", "level": n,
                         "min_effect": c.min_effect} for n in names],
        "design": {"launches": c.launches or d.launches, "requests": c.requests or d.requests,
                   "warmup": d.warmup if c.warmup is None else c.warmup, "seed": seed,
                   "order": "randomized_blocks", "alpha": alpha, "analysis": d.analysis, "sequential": sequential},
    }
    if h.slo:
        data["slo"] = dict(h.slo)
    if h.server_args:
        data["server_args"] = list(h.server_args)
    return data


LOAD_SETTINGS = ("request_rate", "concurrency")  # workload dimensions that are a load: an SLO has a capacity along them


def capacity_ladders(cands: dict[int, Candidate], s: SearchBlock, at: dict[str, str]) -> list[dict[str, Any]]:
    """For each load dimension and each constraint: the measured loads of the configuration `at` (the other
    dimensions held at its values) with their per-launch values of the constrained metric, as the SLO capacity's
    ladder (framework.stats.capacity takes it from here)."""
    out = []
    for name, dim in s.space.items():
        if dim.workload not in LOAD_SETTINGS:
            continue
        for con in s.goal.parsed_constraints():
            rungs = []
            for c in cands.values():
                if all(c.point[k] == v for k, v in at.items() if k != name) and c.values.get(con.metric):
                    rungs.append((float(c.point[name]), list(c.values[con.metric])))
            if rungs:
                out.append({"dimension": name, "constraint": con.text(), "metric": con.metric, "op": con.op,
                            "threshold": con.bound, "rungs": sorted(rungs)})
    return out
