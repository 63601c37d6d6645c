"""Percentile, throughput and goodput predictions end to end: `python -m framework run`, then `audit`."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml
from cli_helpers import ROOT, framework, ledger_records, no_servers_left

from framework.analysis.ruleset import RULESETS
from framework.analysis.verdicts import analyze
from framework.core.metrics import WINDOW_EDGE_S, launch_value
from framework.core.spec import load_hypothesis
from framework.records.trials import read_trials

EAGLE3 = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "lmsys/SGLang-EAGLE3-DeepSeek-V3",
          "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]
LOAD = {"concurrency": 4, "prompt_tokens": 64, "output_tokens": 32}


def hypothesis(metric: str, prediction: dict, slo: dict | None = None) -> dict:
    h = {
        "name": "launch_metric", "statement": f"EAGLE-3 without fusion changes {metric} on the PCIe rig.",
        "experiment": "rtx_pro_6000_tp8", "metric": metric,
        "factors": {"decoding": {"reference": "baseline", "levels": {
            "baseline": {"workload": LOAD}, "eagle3": {"server_args": EAGLE3, "workload": LOAD}}}},
        "predictions": [{"id": "p", "factor": "decoding", "level": "eagle3", **prediction}],
        "design": {"launches": 2, "requests": 4, "warmup": 1, "seed": 17},
    }
    if slo:
        h["slo"] = slo
    return h


CASES = [  # the verdicts are the sim's business; what is checked is the path from rows to verdict and audit
    ("output_throughput", {"kind": "decrease", "min_effect": 0.05}, None),
    ("ttft_s.p99", {"kind": "equivalent", "margin": 0.5}, None),
    ("goodput", {"kind": "decrease", "min_effect": 0.05}, {"ttft_s": 2.0, "tpot_s": 0.05}),
]


@pytest.mark.e2e
def test_launch_metric_predictions_run_and_audit_clean(workdir):
    """One sweep over three hypotheses (one Hydra process): a percentile, a throughput and goodput."""
    hyp = workdir / "hyp"
    hyp.mkdir()
    names = []
    for metric, prediction, slo in CASES:
        name = "m_" + metric.replace(".", "_")
        names.append(name)
        (hyp / f"{name}.yaml").write_text(yaml.safe_dump({**hypothesis(metric, prediction, slo), "name": name},
                                                        sort_keys=False))
    out = framework("run", "-m", f"hypothesis={','.join(names)}", f"paths.hypotheses={hyp}",
                    f"paths.experiments={ROOT / 'experiments'}", "backend.speedup=20", "report=false", cwd=workdir)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert no_servers_left(workdir)
    records = {r["hypothesis"]["name"]: r for r in ledger_records(workdir / "verdicts.jsonl") if r["kind"] == "verdict"}
    assert sorted(records) == sorted(names)
    for (metric, _, _), name in zip(CASES, names, strict=True):
        record = records[name]
        p = record["predictions"][0]
        assert p["estimate"] is not None and math.isfinite(p["estimate"]), p["reason"]
        gm = {c["levels"]["decoding"]: c["metric"]["geometric_mean"] for c in record["conditions"]}
        assert p["estimate"] == pytest.approx(gm["eagle3"] / gm["baseline"])  # the ratio of per-launch values
        # one value per launch, recomputed from the raw rows by the metric's own definition
        trials = Path(record["trials"]["path"])
        rows = read_trials(trials if trials.is_absolute() else workdir / trials)
        h = load_hypothesis(hyp / f"{name}.yaml")
        edge = WINDOW_EDGE_S if RULESETS[record["rules_version"]].window_edge else 0.0  # the record's own window
        for cond in record["conditions"]:
            assert cond["metric"]["name"] == metric and len(cond["metric"]["launch_means"]) == 2
            for lid, value in zip(cond["metric"]["launch_ids"], cond["metric"]["launch_means"], strict=True):
                mine = [r for r in rows if r["kind"] == "request" and r["launch_id"] == lid]
                assert value == pytest.approx(launch_value(metric, mine, dict(h.slo), edge_s=edge))
        assert analyze(h, rows).predictions[0].verdict == p["verdict"]
        workloads = record["analysis"]["workloads"]
        assert len(workloads) == 4 and all(w["measured"] == 4 and w["warmup"] == 4 for w in workloads.values())
    audit = framework("audit", cwd=workdir)
    assert audit.returncode == 0, audit.stdout[-2000:] + audit.stderr[-2000:]
