"""From raw trial rows to per-prediction verdicts: the pure analysis every run and every audit uses.

`analyze(h, rows)` reads nothing and writes nothing: it takes the hypothesis as registered and the
rows of a trials file (dicts as written, see `framework.records.trials`) and returns an `Analysis`.
The run calls it once at the end (or at every look, for sequential designs); `audit` calls it again
on the stored file and compares.
"""

from __future__ import annotations

from typing import Any, Iterable, Literal

from pydantic import BaseModel

from framework.spec import Hypothesis

Verdict = Literal["supported", "refuted", "inconclusive"]


class MetricSummary(BaseModel):
    name: str
    mean: float | None  # mean over launches of the per-launch metric, in the metric's unit
    launch_means: list[float] = []
    sd_between: float | None = None


class ConditionSummary(BaseModel):
    index: int
    levels: dict[str, str]
    launches: dict[str, int]  # {"ok": n, "failed": n}
    metric: MetricSummary
    failures: list[str] = []  # distinct start-up failure messages
    outlier_launches: list[str] = []


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


def analyze(h: Hypothesis, rows: Iterable[dict[str, Any]], *, alpha: float | None = None,
            method: str | None = None) -> Analysis:
    raise NotImplementedError
