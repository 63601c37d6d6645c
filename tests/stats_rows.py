"""Trial rows in the trials.jsonl format, simulated from a simple lognormal launch/request model."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from framework.core.design import conditions
from framework.core.spec import Hypothesis


def simulate(h: Hypothesis, means: dict[int, float], *, launches: int | dict[int, int] = 5, requests: int = 3,
             warmup: int = 1, sd_launch: float = 0.006, sd_request: float | dict[int, float] = 0.004,
             seed: int = 0, metric: str | None = None, failed: dict[int, str] | None = None,
             start_replicate: int = 0, slow: dict[str, float] | None = None) -> list[dict[str, Any]]:
    """Rows for every condition: `means[c]` is the condition's median per-request metric.

    `failed[c]` makes every launch of condition c fail with that error; `slow[launch_id]` multiplies
    one launch's requests (a slow launch).
    """
    rng = np.random.default_rng(seed)
    metric = metric or h.metric
    rows: list[dict[str, Any]] = []
    for c in conditions(h):
        n = launches[c.index] if isinstance(launches, dict) else launches
        sr = sd_request[c.index] if isinstance(sd_request, dict) else sd_request
        for r in range(start_replicate, start_replicate + n):
            lid = f"c{c.index}-r{r}-a1"
            err = (failed or {}).get(c.index)
            rows.append({"kind": "launch", "launch_id": lid, "condition": c.index, "levels": c.levels,
                         "replicate": r, "block": r, "attempt": 1, "seed": r, "ok": err is None,
                         "error": err, "log_tail": [f"RuntimeError: {err}"] if err else [],
                         "startup_s": 2.0, "started": "t", "finished": "t"})
            if err:
                continue
            offset = rng.normal(0, sd_launch) + math.log((slow or {}).get(lid, 1.0))
            for i in range(warmup + requests):
                v = means[c.index] * math.exp(offset + rng.normal(0, sr))
                rows.append({"kind": "request", "trial_id": f"{lid}-q{i}", "launch_id": lid, "condition": c.index,
                             "levels": c.levels, "index": i, "warmup": i < warmup, "ok": True, metric: v,
                             "e2e_s": 2.5})
    return rows


def fail_launches(rows: list[dict[str, Any]], launch_ids: set[str] | list[str],
                  error: str = "CUDA error: out of memory") -> list[dict[str, Any]]:
    """The rows with these launches failed at start-up: their launch row not ok, their other rows gone."""
    out = []
    for r in rows:
        if r["launch_id"] in launch_ids:
            if r["kind"] == "launch":
                out.append({**r, "ok": False, "error": error, "log_tail": [f"RuntimeError: {error}"]})
            continue
        out.append(r)
    return out


def with_superseded_attempt(rows: list[dict[str, Any]], launch_id: str = "c1-r0-a1") -> list[dict[str, Any]]:
    """`rows` with `launch_id` re-run as attempt 2, after an interrupted attempt 1 that left its launch row,
    a warm-up and one measured request (at a wild 5 tok/s) in the file first."""
    again = launch_id.replace("-a1", "-a2")

    def rename(r: dict[str, Any]) -> dict[str, Any]:
        if r["launch_id"] != launch_id:
            return r
        out = {**r, "launch_id": again, "attempt": 2} if r["kind"] == "launch" else {**r, "launch_id": again}
        if "trial_id" in r:
            out["trial_id"] = r["trial_id"].replace("-a1-", "-a2-")
        return out

    first = [r for r in rows if r["launch_id"] == launch_id][:3]
    first = [{**r, "decode_tok_s": 5.0} if r["kind"] == "request" else r for r in first]
    return first + [rename(r) for r in rows]
