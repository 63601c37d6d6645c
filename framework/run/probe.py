"""Plan's noise probe: the sim's own measurement noise on this machine, now, measured through the session like
any run's launches (launches with the sim's noise model switched off), so a probe honours the same backend,
profile, workers and secrets as the run it plans."""

from __future__ import annotations

import io
import math
import tempfile
from pathlib import Path
from typing import Any

from omegaconf import DictConfig
from rich.console import Console

from framework.core import design as design_mod
from framework.core.spec import Hypothesis
from framework.core.trials import Trials
from framework.present.progress import RunProgress
from framework.run.resolve import Resolved
from framework.run.session import Launched, Session, Step, drive, open_context
from framework.stats.variance import components, pooled_components

PROBE_SEED = 1000  # launch i of each condition runs (server and workload) with seed PROBE_SEED + i


class NoiseProbe:
    """The probe's launch policy (framework.run.session.LaunchPolicy): `launches` launches per condition, one at a
    time; a condition whose launch does not start (a launches prediction) gets no more."""

    def __init__(self, h: Hypothesis, launches: int) -> None:
        self.launches = launches
        self.todo = [(cond, i) for cond in design_mod.conditions(h) for i in range(launches)]
        self.given_up: set[int] = set()

    def next(self, trials: Trials) -> list[Step]:
        while self.todo:
            cond, i = self.todo.pop(0)
            if cond.index not in self.given_up:
                return [Step(design_mod.PlannedLaunch(cond, i, i, PROBE_SEED + i), i, self.launches)]
        return []

    def observe(self, step: Step, launched: Launched, trials: Trials) -> None:
        if not all(r.get("ok") for r in launched.trials.of_kind("launch")):
            self.given_up.add(step.planned.condition.index)  # nothing to measure: its other launches would fail too


def probe_measurement_noise(cfg: DictConfig, resolved: Resolved, *, launches: int, requests: int) -> dict[str, Any]:
    """The sim's own measurement noise on this machine, now: launches with its noise model switched off.

    With `--sim-noise-scale 0` the simulator's model is deterministic, so whatever spread the metric
    still shows between requests and launches comes from measuring it: the sim's clock and
    scheduling at the configured speed-up, the HTTP client, the machine's load. Returns per-condition
    within-launch sds and the pooled between-launch sd (log scale), as the ANOVA of section 6 of
    docs/statistics.md estimates them.
    """
    h = resolved.hypothesis
    backend = resolved.backend.model_copy(update={"noise_scale": 0.0})
    design = resolved.design.model_copy(update={"requests": requests, "warmup": 1})
    quiet = Console(file=io.StringIO())
    with tempfile.TemporaryDirectory() as tmp:
        ctx = open_context(cfg, resolved, Path(tmp), backend=backend, design=design)
        progress = RunProgress(quiet, f"probe {h.name}", total_launches=launches, requests_per_launch=requests + 1,
                               enabled=False)
        with Session(ctx) as session:
            drive(session, NoiseProbe(h, launches), progress)
        trials = session.trials
    within: dict[int, float] = {}
    groups_by_cond: list[list[list[float]]] = []
    for cond in design_mod.conditions(h):
        groups: list[list[float]] = []
        for launch_id, rows in trials.by_launch().items():
            measured = [r.get(h.metric) for r in Trials(rows).of_kind("request")
                        if r.get("condition") == cond.index and not r.get("warmup") and r.get("ok")]
            logs = [math.log(v) for v in measured if isinstance(v, (int, float)) and v > 0]
            if logs and launch_id:
                groups.append(logs)
        comp = components(groups)
        if comp.var_within is not None:
            within[cond.index] = math.sqrt(comp.var_within)
        groups_by_cond.append(groups)
    pooled = pooled_components(groups_by_cond)
    return {"within": within, "between": math.sqrt(pooled.var_between or 0.0),
            "launches": launches, "requests": requests, "speedup": backend.speedup}
