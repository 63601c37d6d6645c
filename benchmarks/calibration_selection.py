"""Calibration of a search's selection against its peers: how often each picks the best (or one within delta).

Two spaces on the sim, with their true values from the sim's own model (`expected_metrics`, noise off, at each
grid point of the hypothesis: flags, workload and profile as the run path resolves them):

- `eagle3_tuning` (40 points, 10 distinct configurations; best steps 2 + fusion, the next 1.3% lower);
- `search_slo_concurrency` (benchmarks/spaces/; 30 points; output throughput under `ttft_s <= 0.3`, which in the
  model excludes the unconstrained best at 16 streams and 8 streams' 0.24 s keeps. The served sim measured a
  lower TTFT at 16 streams than `expected_metrics` says, 0.16 s at 2 requests a launch, so this space's constraint
  is in the model's terms: it is not shipped as a hypothesis).

Launch values are drawn in-process from the sim's noise model (no server processes): a launch's offset and slow
flag from `model.draw_launch` (the sim's own function), times the mean of `requests` per-request log-normal
factors with the sim's per-request sd of the metric (`model.request_log_sd`: time jitter and accept-length
jitter) for rates; TTFT gets the launch factor and the profile's request_log_sd. (Not drawn: step jitter, which a
launch's hundreds of steps average away.) Rates fall and times rise with the launch factor.

Methods, every one at a budget fixed before the first run (numbers below):

- `optuna+KN` (the search as shipped): Optuna TPE exploration as `run/search.py` drives it (the reference first,
  each candidate `launches_per_candidate` launches, one trial a launch, duplicates told as failed), its best
  `select.finalists` feasible candidates to KN on fresh launches (framework.stats.ranking, n0 = first_stage,
  capped at max_launches a finalist);
- `random+KN`: the same with Optuna's RandomSampler;
- `optuna+race` (rules version 4's search): TPE exploration of budget - refine launches and the racing of
  `analysis.search.next_in_race`, then the exploration's best;
- `random`: plain random search, points without replacement at 2 launches each, best mean, at the budget of
  optuna+KN's maximum;
- `halving`: successive halving at the same maximum budget (16 random points, 4 rounds of budget/4 launches,
  halving on the cumulative mean);
- `grid`: every point at 2 launches, best mean.

Printed per space and method, over the seeds: P(correct) = the chosen point is feasible in truth and within
delta of the true best, with its Clopper-Pearson 95% interval; P(the exact best configuration); mean regret
(1 - true chosen / true best); launches (mean, max); for KN, how often it stopped at its own end vs the cap.
Also the selection-corrected estimate's bias (`stats.selection.winner_estimate`, hybrid, separate variances,
on optuna+KN's exploration) against the true ratio of its winner to the reference.

    python benchmarks/calibration_selection.py            # 120 seeds per space (about 10 minutes, 1 core)
    python benchmarks/calibration_selection.py --quick    # 30
    python benchmarks/calibration_selection.py --spaces eagle3_tuning --exploration 30 --max-launches 16 --first 1000
        # a design weighed before shipping it, on a fresh set of searches

Fixed before the first run: alpha 0.05 and delta 0.01 (the hypotheses' design and select blocks), finalists 2,
first stage 5, at most 20 fresh launches a finalist, exploration 24 launches, seed 20261235 (seed r of space s:
numpy default_rng([seed, s, r]), Optuna's sampler seeded with r).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from framework.analysis import search as an  # noqa: E402
from framework.core import design as design_mod  # noqa: E402
from framework.core.spec import Hypothesis, load_experiment, load_hypothesis  # noqa: E402
from framework.run import search as rs  # noqa: E402
from framework.servers.sim import model  # noqa: E402
from framework.servers.sim.expected import expected_metrics  # noqa: E402
from framework.servers.sim.profile import load_profile  # noqa: E402
from framework.stats import ranking, selection  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SEED = 20261235
SPACES = ("eagle3_tuning", "search_slo_concurrency")
RATES = ("decode_tok_s", "output_tok_s", "output_throughput", "request_throughput")


class Space:
    """A hypothesis's grid with the sim's true value of every metric at every point, and its launch-noise draws."""

    def __init__(self, name: str, exploration: int | None = None, max_launches: int | None = None) -> None:
        shipped = ROOT / "hypotheses" / f"{name}.yaml"
        self.h: Hypothesis = load_hypothesis(shipped if shipped.is_file() else ROOT / "benchmarks" / "spaces" /
                                             f"{name}.yaml")
        s = self.h.search
        assert s is not None and s.select is not None
        if exploration is not None:  # a design to weigh before shipping it (--exploration)
            s = s.model_copy(update={"budget": s.budget.model_copy(update={"launches": exploration})})
        if max_launches is not None:
            s = s.model_copy(update={"select": s.select.model_copy(update={"max_launches": max_launches})})
        self.s = s
        assert self.s.select is not None
        exp = load_experiment(ROOT / "experiments" / f"{self.h.experiment}.yaml")
        grid = an.grid_hypothesis(self.h)
        self.metrics = an.metrics_of(self.s)
        self.truth: dict[str, dict[str, float]] = {}
        self.sd_req: dict[str, float] = {}
        self.points: list[dict[str, str]] = []
        self.profile = None
        for cond in design_mod.conditions(grid):
            prof = load_profile(design_mod.sim_profile_for(grid, exp, cond))
            self.profile = prof
            flags = design_mod.server_args_for(grid, exp, cond)
            w = design_mod.workload_for(grid, exp, cond)
            m = expected_metrics(prof, flags, int(w.prompt_tokens), int(w.output_tokens), w.concurrency,
                                 requests=self.h.design.requests, warmup=self.h.design.warmup)
            point = dict(cond.levels)
            k = key(point)
            self.points.append(point)
            self.truth[k] = {mt: float(m[mt.split(".")[0]]) for mt in self.metrics}
            self.sd_req[k] = model.request_log_sd(prof, flags, int(w.output_tokens))
        self.requests = self.h.design.requests
        feas = [p for p in self.points if self.feasible_true(p)]
        self.best = max(feas, key=lambda p: self.truth[key(p)][self.s.goal.metric])
        self.best_value = self.truth[key(self.best)][self.s.goal.metric]
        self.delta = self.s.select.log_delta()

    def feasible_true(self, point: dict[str, str]) -> bool:
        t = self.truth[key(point)]
        return all(c.slack(t[c.metric]) <= 0 for c in self.s.goal.parsed_constraints())

    def draw(self, point: dict[str, str], rng: np.random.Generator) -> dict[str, float]:
        """One launch's values of every metric at `point`."""
        k = key(point)
        launch = model.draw_launch(self.profile, 1.0, rng)
        rate_jitter = float(np.mean(rng.normal(0.0, self.sd_req[k], self.requests)))
        time_jitter = float(np.mean(rng.normal(0.0, self.profile.noise.request_log_sd, self.requests)))
        out = {}
        for mt, v in self.truth[k].items():
            base = mt.split(".")[0]
            out[mt] = v / launch.factor * math.exp(rate_jitter) if base in RATES else v * launch.factor * math.exp(
                time_jitter)
        return out

    def regret(self, point: dict[str, str]) -> float:
        return 1.0 - self.truth[key(point)][self.s.goal.metric] / self.best_value

    def correct(self, point: dict[str, str]) -> bool:
        return self.feasible_true(point) and math.log(self.best_value / self.truth[key(point)][self.s.goal.metric]) \
            <= self.delta + 1e-12

    def exact(self, point: dict[str, str]) -> bool:
        return self.truth[key(point)][self.s.goal.metric] >= self.best_value * (1 - 1e-9) and self.feasible_true(point)


def key(point: dict[str, str]) -> str:
    return json.dumps(point, sort_keys=True)


class Pool:
    """Each point's launches so far, as an.Candidate objects (what the search's own ranking functions read)."""

    def __init__(self, sp: Space) -> None:
        self.sp = sp
        self.index = {key(p): i for i, p in enumerate(sp.points)}
        self.cands: dict[int, an.Candidate] = {}
        self.launches = 0

    def launch(self, point: dict[str, str], rng: np.random.Generator) -> dict[str, float]:
        v = self.sp.draw(point, rng)
        i = self.index[key(point)]
        c = self.cands.setdefault(i, an.Candidate(i, dict(point)))
        for mt, x in v.items():
            c.values.setdefault(mt, []).append(x)
        self.launches += 1
        return v

    def best(self, at_least: int = 1) -> an.Candidate | None:
        order = an.ranked(self.cands, self.sp.s, at_least=at_least)
        return order[0] if order else None


def explore_optuna(sp: Space, rng: np.random.Generator, seed: int, sampler: str, launches: int) -> Pool:
    """The exploration of run/search.py's Exploration._choose, launch by launch, on drawn values."""
    optuna = rs._optuna()
    s = sp.s.model_copy(update={"sampler": sampler})
    objectives = s.goal.objectives()
    study = optuna.create_study(directions=[o.direction for o in objectives], sampler=rs._sampler(optuna, s, seed))
    dists = rs._distributions(optuna, s)
    pool = Pool(sp)
    cons = s.goal.parsed_constraints()

    def tell(trial: Any, v: dict[str, float]) -> None:
        slack = [c.slack(v[c.metric]) for c in cons]
        trial.set_user_attr("constraints", slack)
        if hasattr(trial, "set_constraint"):
            for c, x in zip(s.goal.constraints, slack, strict=True):
                trial.set_constraint(c, x)
        study.tell(trial, [v[o.metric] for o in objectives])

    pending = [s.reference_point()] * s.launches_per_candidate
    asks = 0
    while pool.launches < launches:
        if pending:
            point = pending.pop(0)
            study.enqueue_trial(rs._params(s, point), skip_if_exists=False)
            trial = study.ask(dists)
        else:
            asks += 1
            if asks > rs.MAX_ASKS_PER_LAUNCH * launches:
                break
            trial = study.ask(dists)
            point = rs._point(s, trial.params)
            c = pool.cands.get(pool.index[key(point)])
            if c is not None and c.launches >= s.launches_per_candidate:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
                if len(pool.cands) >= len(sp.points):
                    break
                continue
            pending = [point] * (s.launches_per_candidate - 1)
        tell(trial, pool.launch(point, rng))
    return pool


def finalists(sp: Space, pool: Pool) -> list[an.Candidate]:
    return an.ranked(pool.cands, sp.s, at_least=2)[:sp.s.select.finalists]


def kn_stage(sp: Space, fin: list[an.Candidate], rng: np.random.Generator, alpha: float
             ) -> tuple[dict[str, str], int, ranking.KNState | None]:
    """KN among the finalists on fresh launches; (chosen point, fresh launches, KN's end state)."""
    sel = sp.s.select
    metric = sp.s.goal.metric
    direction = "max" if sp.s.goal.direction == "maximize" else "min"
    if len(fin) < 2:
        return (fin[0].point if fin else sp.s.reference_point()), 0, None
    names = [an.describe(c.point) for c in fin]
    by = dict(zip(names, fin, strict=True))
    fresh: dict[str, list[float]] = {n: [] for n in names}
    spent = 0
    while True:
        st = ranking.kn_select(fresh, alpha, sel.log_delta(), sel.first_stage, direction,
                               max_stage_cap=sel.max_launches)
        if st.done:
            return by[st.best].point, spent, st
        for n in st.needs:
            fresh[n].append(sp.draw(by[n].point, rng)[metric])
            spent += 1


def run_optuna_kn(sp: Space, r: int, rng: np.random.Generator, sampler: str, alpha: float) -> dict[str, Any]:
    pool = explore_optuna(sp, rng, r, sampler, sp.s.budget.launches)
    fin = finalists(sp, pool)
    chosen, spent, st = kn_stage(sp, fin, rng, alpha)
    out = {"point": chosen, "launches": pool.launches + spent,
           "best_in_finalists": any(sp.correct(c.point) for c in fin),
           "kn_end": (None if st is None else ("cap" if "cap" in st.why else
                                               ("last stage" if "last stage" in st.why else "eliminated")))}
    if sampler == "tpe":
        out["bias"] = corrected_bias(sp, pool, alpha)
    return out


def corrected_bias(sp: Space, pool: Pool, alpha: float) -> dict[str, float] | None:
    """log(corrected / true ratio) and log(naive / true ratio) of the exploration's winner against the reference."""
    metric = sp.s.goal.metric
    ref = next((c for c in pool.cands.values() if c.point == sp.s.reference_point()), None)
    others = {an.describe(c.point): c.values[metric] for c in an.ranked(pool.cands, sp.s, at_least=2)
              if c.point != sp.s.reference_point()}
    if ref is None or len(ref.values[metric]) < 2 or not others:
        return None
    w = selection.winner_estimate(others, ref.values[metric], "max", alpha, variance="separate")
    win = next(c for c in pool.cands.values() if an.describe(c.point) == w.winner)
    true = math.log(sp.truth[key(win.point)][metric] / sp.truth[key(sp.s.reference_point())][metric])
    return {"corrected": math.log(w.corrected) - true, "naive": math.log(w.naive) - true}


def run_optuna_race(sp: Space, r: int, rng: np.random.Generator) -> dict[str, Any]:
    s = sp.s
    refine = s.budget.launches // 4
    pool = explore_optuna(sp, rng, r, "tpe", s.budget.launches - refine)
    while pool.launches < s.budget.launches:
        c = an.next_in_race(pool.cands, s)
        if c is None or c.launches >= 20:
            break
        pool.launch(c.point, rng)
    b = pool.best(2)
    return {"point": b.point if b else s.reference_point(), "launches": pool.launches}


def run_random(sp: Space, rng: np.random.Generator, budget: int) -> dict[str, Any]:
    pool = Pool(sp)
    order = rng.permutation(len(sp.points))
    for i in order[: budget // 2]:
        for _ in range(2):
            pool.launch(sp.points[int(i)], rng)
    b = pool.best(2)
    return {"point": b.point if b else sp.s.reference_point(), "launches": pool.launches}


def run_halving(sp: Space, rng: np.random.Generator, budget: int, start: int = 16) -> dict[str, Any]:
    pool = Pool(sp)
    alive = [sp.points[int(i)] for i in rng.permutation(len(sp.points))[:start]]
    rounds = int(math.log2(start))
    per_round = budget // rounds
    for _ in range(rounds):
        each = max(1, per_round // len(alive))
        for p in alive:
            for _ in range(each):
                pool.launch(p, rng)
        cands = {pool.index[key(p)]: pool.cands[pool.index[key(p)]] for p in alive}
        order = an.ranked(cands, sp.s) or list(cands.values())
        alive = [c.point for c in order[: max(1, len(alive) // 2)]]
    return {"point": alive[0], "launches": pool.launches}


def run_grid(sp: Space, rng: np.random.Generator) -> dict[str, Any]:
    pool = Pool(sp)
    for p in sp.points:
        for _ in range(2):
            pool.launch(p, rng)
    b = pool.best(2)
    return {"point": b.point if b else sp.s.reference_point(), "launches": pool.launches}


METHODS = ("optuna+KN", "random+KN", "optuna+race", "random", "halving", "grid")


def one_seed(sp: Space, space_index: int, r: int) -> dict[str, dict[str, Any]]:
    alpha = sp.s.select.alpha or sp.h.design.alpha
    budget = sp.s.budget.launches + sp.s.select_launches()

    def rng(m: int) -> np.random.Generator:
        return np.random.default_rng([SEED, space_index, r, m])

    return {"optuna+KN": run_optuna_kn(sp, r, rng(0), "tpe", alpha),
            "random+KN": run_optuna_kn(sp, r, rng(1), "random", alpha),
            "optuna+race": run_optuna_race(sp, r, rng(2)),
            "random": run_random(sp, rng(3), budget),
            "halving": run_halving(sp, rng(4), budget),
            "grid": run_grid(sp, rng(5))}


def clopper_pearson(x: int, n: int) -> tuple[float, float]:
    from statsmodels.stats.proportion import proportion_confint

    lo, hi = proportion_confint(x, n, alpha=0.05, method="beta")
    return float(lo), float(hi)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="30 seeds per space")
    ap.add_argument("--seeds", type=int, default=None, help="seeds per space (default 120, quick 30)")
    ap.add_argument("--first", type=int, default=0,
                    help="the first search index r (default 0; a fresh set of searches: 1000)")
    ap.add_argument("--spaces", nargs="+", default=list(SPACES), choices=SPACES, help="the spaces to run")
    ap.add_argument("--exploration", type=int, default=None,
                    help="exploration launches instead of the hypothesis's budget.launches (a design to weigh)")
    ap.add_argument("--max-launches", type=int, default=None,
                    help="fresh launches a finalist at most, instead of the hypothesis's select.max_launches")
    args = ap.parse_args(argv)
    n = args.seeds or (30 if args.quick else 120)
    t0 = time.time()
    print(f"selection calibration: seed {SEED}, searches {args.first}-{args.first + n - 1} per space; launch values "
          "drawn from the sim's noise model "
          "in-process (model.draw_launch, model.request_log_sd); truth from expected_metrics\n")
    checks: list[tuple[str, bool, str]] = []
    for si, name in enumerate(SPACES):
        if name not in args.spaces:
            continue
        sp = Space(name, args.exploration, args.max_launches)
        sel = sp.s.select
        alpha = sel.alpha or sp.h.design.alpha
        goal = sp.s.goal.metric
        ranked_true = sorted({round(t[goal], 6) for p, t in sp.truth.items() if sp.feasible_true(json.loads(p))},
                             reverse=True)
        print(f"{name}: {len(sp.points)} points, best {an.describe(sp.best)} at {sp.best_value:.4g} {goal} "
              f"(next distinct feasible value {100 * (1 - ranked_true[1] / ranked_true[0]):.2f}% lower); "
              f"alpha {alpha}, delta {sel.delta}, finalists {sel.finalists}, n0 {sel.first_stage}, at most "
              f"{sel.max_launches} fresh launches a finalist; exploration {sp.s.budget.launches} launches; "
              f"budget of random and halving {sp.s.budget.launches + sp.s.select_launches()}")
        res = [one_seed(sp, si, r) for r in range(args.first, args.first + n)]
        for m in METHODS:
            rows = [x[m] for x in res]
            ok = sum(sp.correct(x["point"]) for x in rows)
            lo, hi = clopper_pearson(ok, n)
            exact = sum(sp.exact(x["point"]) for x in rows) / n
            regret = float(np.mean([sp.regret(x["point"]) for x in rows]))
            launches = [x["launches"] for x in rows]
            extra = ""
            if "kn_end" in rows[0]:
                ends = {e: sum(x["kn_end"] == e for x in rows) for e in ("eliminated", "last stage", "cap")}
                fin = sum(x["best_in_finalists"] for x in rows) / n
                extra = (f"; best among finalists {fin:.3f}; KN ended: " +
                         ", ".join(f"{k} {v}" for k, v in ends.items()))
            print(f"  {m:12s} P(correct) {ok / n:.3f} [{lo:.3f}, {hi:.3f}]  P(exact best) {exact:.3f}  "
                  f"regret {100 * regret:.2f}%  launches mean {np.mean(launches):.1f} max {max(launches)}{extra}")
            if m == "optuna+KN":
                checks.append((f"{name}: optuna+KN correct selection >= 1 - alpha (not below it beyond "
                               "the 95% interval)", hi >= 1 - alpha, f"{ok / n:.3f} [{lo:.3f}, {hi:.3f}]"))
                grid = len(sp.points) * 2
                checks.append((f"{name}: optuna+KN mean launches below the grid's", np.mean(launches) < grid,
                               f"{np.mean(launches):.1f} vs {grid}"))
                checks.append((f"{name}: optuna+KN max launches below the grid's", max(launches) < grid,
                               f"{max(launches)} vs {grid}"))
        bias = [x["optuna+KN"]["bias"] for x in res if x["optuna+KN"].get("bias")]
        if bias:
            c = np.array([b["corrected"] for b in bias])
            nv = np.array([b["naive"] for b in bias])
            print(f"  exploration's estimate of its winner against the reference, log(estimate / truth) over "
                  f"{len(bias)} seeds: corrected (hybrid, separate) mean {c.mean():+.4f} (SE "
                  f"{c.std(ddof=1) / math.sqrt(len(c)):.4f}), median {np.median(c):+.4f}, P(> truth) "
                  f"{np.mean(c > 0):.3f}; naive mean {nv.mean():+.4f}, median {np.median(nv):+.4f}, P(> truth) "
                  f"{np.mean(nv > 0):.3f}")
        print()
    print("acceptance checks:")
    for what, ok, detail in checks:
        print(f"  {'PASS' if ok else 'FAIL'}  {what}  {detail}")
    print(f"\n{sum(ok for _, ok, _ in checks)}/{len(checks)} checks pass; {time.time() - t0:.0f} s")
    return 0 if all(ok for _, ok, _ in checks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
