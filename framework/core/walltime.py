"""How long a run will take at least, from what its workloads fix, before anything starts.

An open loop's schedule fixes its length in model time: `duration_s` after the warm-up arrivals,
or its requests over `request_rate`. At the backend's time scale (the sim's speed-up; 1 for a real
server) that is a floor on every launch's wall time, and a run makes up to every condition's
launches (a sequential design's cap). A closed loop's requests take what the server needs (`plan`
estimates that from a model or a pilot), and so does start-up: both come on top, so the estimate
is a lower bound. `validate` and `run` print it, and a run above `LONG_RUN_S` needs `allow_long=true`:
CI and SLURM have no terminal to ask.
"""

from __future__ import annotations

from dataclasses import dataclass

from framework.core.design import conditions, workload_for
from framework.core.spec import Design, Experiment, Hypothesis
from framework.core.workload import Workload, total_requests

LONG_RUN_S = 4 * 3600.0  # "more than a few hours": a run estimated above this needs allow_long=true
NOTE_S = 600.0  # a run estimated at 10 minutes or more says so before it starts
ALLOW_LONG = "allow_long=true"


@dataclass(frozen=True)
class WallTime:
    """A run's wall-time floor: seconds in all, the longest launch's, and how many launches at most."""

    total_s: float
    longest_launch_s: float
    launches: int
    time_scale: float

    @property
    def long(self) -> bool:
        return self.total_s > LONG_RUN_S


def launch_span_s(w: Workload, requests_n: int, warmup: int) -> float:
    """Model seconds one launch's schedule spans at least (0 for a closed loop: the server decides)."""
    if not w.open_loop:
        return 0.0
    rate = float(w.request_rate)  # type: ignore[arg-type]
    n_warm, n_meas = total_requests(w, requests_n, warmup)
    if w.duration_s is not None:
        return n_warm / rate + w.duration_s
    return max(0, n_warm + n_meas - 1) / rate


def estimate(h: Hypothesis, exp: Experiment, d: Design, time_scale: float = 1.0) -> WallTime:
    """The floor of a run's wall time under design `d` at `time_scale` model seconds per wall second."""
    per_cond = d.sequential.max_launches if d.sequential.enabled and d.sequential.max_launches else d.launches
    spans = [launch_span_s(workload_for(h, exp, c), d.requests, d.warmup) / time_scale for c in conditions(h)]
    return WallTime(total_s=per_cond * sum(spans), longest_launch_s=max(spans, default=0.0),
                    launches=per_cond * len(spans), time_scale=time_scale)


def estimate_search(grid: Hypothesis, exp: Experiment, d: Design, launches: int,
                    time_scale: float = 1.0) -> WallTime:
    """The floor of a search's exploration: `launches` launches, each at least the shortest point's open-loop
    schedule (the budget, not the grid, says how many launches it makes; its confirmation comes on top)."""
    spans = [launch_span_s(workload_for(grid, exp, c), d.requests, d.warmup) / time_scale for c in conditions(grid)]
    return WallTime(total_s=launches * min(spans, default=0.0), longest_launch_s=max(spans, default=0.0),
                    launches=launches, time_scale=time_scale)


def duration(seconds: float) -> str:
    """Seconds as a person reads a wait: 40 s, 7.5 min, 86.4 h."""
    return (f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.1f} min" if seconds >= 60
            else f"{seconds:.0f} s")


def describe(wt: WallTime) -> str:
    """One line: the floor, and what it is made of."""
    scale = f" at speed-up {wt.time_scale:g}" if wt.time_scale != 1 else ""
    return (f"estimated wall time at least {duration(wt.total_s)} (up to {wt.launches} launches, the longest "
            f"{duration(wt.longest_launch_s)} of open-loop schedule{scale}; start-up and closed-loop requests "
            f"come on top)")
