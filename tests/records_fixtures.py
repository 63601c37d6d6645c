"""Synthetic runs for the audit and report tests: trial rows, verdict records, run directories.

The rows mimic a run of the shipped `eagle3_allreduce` (the seed's four configurations); the
analysis used to build the records is whatever function the test passes (`fake_analyze` here, so
the ledger tests do not depend on the statistics module, or the real `framework.analysis.verdicts.analyze`).
"""

from __future__ import annotations

import hashlib
import json
import math
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import numpy as np

from framework.analysis.verdicts import Analysis, ConditionSummary, MetricSummary, PredictionResult
from framework.core.design import conditions
from framework.core.spec import Hypothesis, Interaction, Launches, load_hypothesis
from framework.records import ledger
from framework.records.models import VerdictRecord
from framework.records.registration import check_or_amend

ROOT = Path(__file__).resolve().parents[1]
EAGLE = ROOT / "hypotheses" / "eagle3_allreduce.yaml"
SEED_TOK_S = {("off", "baseline"): 92.6, ("on", "baseline"): 92.7, ("off", "eagle3"): 54.1, ("on", "eagle3"): 96.1}


def trial_rows(h: Hypothesis, *, launches: int = 5, requests: int = 3, seed: int = 7,
               tok_s: dict[tuple[str, str], float] = SEED_TOK_S) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    rows: list[dict[str, Any]] = []
    for rep in range(launches):
        for c in conditions(h):
            key = (c.levels["fusion"], c.levels["decoding"])
            launch_id = f"c{c.index}-r{rep}"
            rows.append({"kind": "launch", "launch_id": launch_id, "condition": c.index, "levels": c.levels,
                         "replicate": rep, "block": rep, "seed": 1000 + rep, "ok": True,
                         "started": "2026-11-29T08:00:00Z", "finished": "2026-11-29T08:00:01Z"})
            launch_mean = tok_s[key] * math.exp(rng.normal(0, 0.004))
            for i in range(requests + 1):
                rows.append({"kind": "request", "trial_id": f"{launch_id}-q{i}", "launch_id": launch_id,
                             "condition": c.index, "levels": c.levels, "index": i, "warmup": i == 0, "ok": True,
                             "completion_tokens": 256,
                             "decode_tok_s": round(launch_mean * math.exp(rng.normal(0, 0.002)), 6)})
    return rows


def _launch_means(rows: list[dict[str, Any]], metric: str) -> dict[int, list[float]]:
    per: dict[str, list[float]] = {}
    cond: dict[str, int] = {}
    for r in rows:
        if r["kind"] == "request" and r["ok"] and not r["warmup"]:
            per.setdefault(r["launch_id"], []).append(r[metric])
            cond[r["launch_id"]] = r["condition"]
    out: dict[int, list[float]] = {}
    for lid, vals in per.items():
        out.setdefault(cond[lid], []).append(float(np.mean(vals)))
    return out


def fake_analyze(h: Hypothesis, rows: Any, *, alpha: float | None = None, method: str | None = None) -> Analysis:
    """A deterministic stand-in with the real interface: ratios of condition means, a crude CI."""
    rows = list(rows)
    means = _launch_means(rows, h.metric)
    conds = conditions(h)
    idx = {json.dumps(c.levels, sort_keys=True): c.index for c in conds}

    def cond(levels: dict[str, str]) -> int:
        return idx[json.dumps(levels, sort_keys=True)]

    def ratio(factor: str, level: str, where: dict[str, str]) -> float:
        ref = h.factors[factor].reference
        return float(np.mean(means[cond({**where, factor: level})]) / np.mean(means[cond({**where, factor: ref})]))

    preds = []
    for p in h.predictions:
        if isinstance(p, Launches):
            preds.append(PredictionResult(id=p.id, kind=p.kind, verdict="supported", reason="fake"))
            continue
        if isinstance(p, Interaction):
            by_ref = p.by_reference or h.factors[p.by].reference
            at_level = ratio(p.factor, p.level, {**p.where, p.by: p.by_level})
            est = at_level / ratio(p.factor, p.level, {**p.where, p.by: by_ref})
        else:
            est = ratio(p.factor, p.level, p.where)
        ci = [est * 0.99, est * 1.01]
        if p.kind == "equivalent":
            ok = 1 - p.margin < ci[0] and ci[1] < 1 + p.margin
        else:
            ok = ci[0] > 1 + p.min_effect
        preds.append(PredictionResult(id=p.id, kind=p.kind, verdict="supported" if ok else "refuted",
                                      estimate=est, ci=ci, p_value=0.001, reason="fake rule"))
    overall = "supported" if all(p.verdict == "supported" for p in preds) else "refuted"
    summaries = [ConditionSummary(index=c.index, levels=c.levels,
                                  launches={"ok": len(means.get(c.index, [])), "failed": 0},
                                  metric=MetricSummary(name=h.metric, mean=float(np.mean(means[c.index])),
                                                       launch_means=means[c.index]))
                 for c in conds]
    return Analysis(verdict=overall, predictions=preds, conditions=summaries,
                    details={"alpha": alpha or h.design.alpha, "method": method or h.design.analysis})


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def make_run(base: Path, run_name: str, ledger_path: Path, *, hypothesis_path: Path = EAGLE,
             analyze: Callable[..., Analysis] = fake_analyze, seed: int = 7,
             tok_s: dict[tuple[str, str], float] = SEED_TOK_S, environment: dict[str, Any] | None = None,
             backend: str = "sim", allow_amend: bool = False, extra_analysis: dict[str, Any] | None = None,
             started: str | None = None,
             rows_hook: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None) -> dict[str, Any]:
    """A run directory under `base` (trials.jsonl, config.yaml, verdict.json) whose verdict is appended
    to the ledger, after registering the hypothesis, as the runner does."""
    started = started or datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    h = load_hypothesis(hypothesis_path)
    settings = {"alpha": h.design.alpha, "method": h.design.analysis}
    reg_hash, _ = check_or_amend(ledger_path, hypothesis_path, settings, allow_amend, git_commit="0" * 40)
    run_dir = base / run_name
    rows = trial_rows(h, seed=seed, tok_s=tok_s)
    if rows_hook is not None:
        rows = rows_hook(rows)
    trials = run_dir / "trials.jsonl"
    write_jsonl(trials, rows)
    (run_dir / "config.yaml").write_text(f"hypothesis: {h.name}\nbackend: {backend}\n", encoding="utf-8")
    a = analyze(h, rows, alpha=settings["alpha"], method=settings["method"])
    content = hypothesis_path.read_text(encoding="utf-8")
    by_index = {c.index: c for c in conditions(h)}
    rec = VerdictRecord(
        hypothesis={"name": h.name, "sha256": hashlib.sha256(hypothesis_path.read_bytes()).hexdigest(),
                    "statement": h.statement, "path": f"hypotheses/{hypothesis_path.name}", "content": content},
        backend=backend, verdict=a.verdict,
        predictions=[p.model_dump() for p in a.predictions],
        conditions=[{"levels": c.levels, "server_args": [f"--flag-{by_index[c.index].index}"],
                     "launches": c.launches, "metric": {"name": c.metric.name, "mean": c.metric.mean,
                                                        "launch_means": c.metric.launch_means}}
                    for c in a.conditions],
        trials={"path": str(trials.relative_to(ledger_path.parent)), "sha256": ledger.sha256_file(trials),
                "rows": len(rows), "bytes": trials.stat().st_size},
        environment=environment or {"backend": backend, "server_version": "0.5.9-sim", "cuda": None, "gpu": None},
        config={"hypothesis": h.name, "backend": backend},
        analysis={**settings, **(extra_analysis or {})},
        run_dir=str(run_dir.relative_to(ledger_path.parent)), registration=reg_hash,
        started=started, finished=started,
    )
    stored = ledger.append(ledger_path, rec)
    (run_dir / "verdict.json").write_text(json.dumps(stored, indent=2), encoding="utf-8")
    return stored
