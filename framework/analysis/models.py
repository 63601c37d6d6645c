"""What the analysis returns: the `Analysis` of a run, as a verdict record stores it.

Kept apart from the phases that fill it (`rows`, `launches`, `predictions`, `verdicts`) so that each
phase can name the shapes it builds without importing the others, and a ledger reader
(`framework.records.models`) can import `Verdict` without the statistics.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

Verdict = Literal["supported", "refuted", "inconclusive"]


class MetricSummary(BaseModel):
    name: str
    mean: float | None  # mean over launches of the per-launch metric, in the metric's unit
    launch_means: list[float] = []
    sd_between: float | None = None  # sample sd of the per-launch metric, in the metric's unit
    launch_ids: list[str] = []  # the launches of `launch_means`, in the same order
    geometric_mean: float | None = None  # exp(mean of log per-launch metric): what ratios compare


class ConditionSummary(BaseModel):
    index: int
    levels: dict[str, str]
    launches: dict[str, int]  # {"ok": n, "failed": n, "without_data": n}
    metric: MetricSummary
    failures: list[str] = []  # distinct start-up failure messages
    outlier_launches: list[str] = []
    variance: dict[str, Any] | None = None  # log-scale variance components (stats.variance.Components)


class PredictionResult(BaseModel):
    id: str
    kind: str
    verdict: Verdict
    estimate: float | None = None
    ci: list[float] | None = None
    p_value: float | None = None
    reason: str
    details: dict[str, Any] = {}


class Analysis(BaseModel):
    verdict: Verdict
    predictions: list[PredictionResult]
    conditions: list[ConditionSummary]
    details: dict[str, Any] = {}
