"""End to end at the default settings: a TTFT hypothesis with a true ~4.3x effect is estimated within 5%
of the model's ratio (the issue measured 2.74x at the default speed-up before the model clock)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from cli_helpers import ROOT, framework, ledger_records

from framework.servers.sim.expected import expected_metrics

FLAGS = ["--tp-size", "8", "--mem-fraction-static", "0.85", "--cuda-graph-max-bs", "16"]  # the experiment's


@pytest.mark.e2e
def test_ttft_grows_4x_from_128_to_1024_prompt_tokens_at_the_default_speedup(workdir: Path):
    hyp = {"name": "ttft_prompt_length", "statement": "TTFT grows at least 3x from 128- to 1024-token prompts",
           "experiment": "rtx_pro_6000_tp8", "metric": "ttft_s",
           "factors": {"prompt": {"reference": "short", "levels": {
               "short": {"workload": {"prompt_tokens": 128, "output_tokens": 8}},
               "long": {"workload": {"prompt_tokens": 1024, "output_tokens": 8}}}}},
           "predictions": [{"id": "grows_3x", "kind": "increase", "factor": "prompt", "level": "long",
                            "min_effect": 2.0}],
           "design": {"launches": 2, "requests": 3, "warmup": 1, "seed": 41}}
    (workdir / "hypotheses").mkdir()
    (workdir / "hypotheses" / "ttft_prompt_length.yaml").write_text(yaml.safe_dump(hyp, sort_keys=False))
    out = framework("run", "hypothesis=ttft_prompt_length", f"paths.hypotheses={workdir / 'hypotheses'}",
                    f"paths.experiments={ROOT / 'experiments'}", cwd=workdir)  # default backend.speedup (20)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    rec = ledger_records(workdir / "verdicts.jsonl")[-1]
    (p,) = rec["predictions"]
    true_ratio = (expected_metrics("rtx_pro_6000_tp8", FLAGS, 1024, 8)["ttft_s"]
                  / expected_metrics("rtx_pro_6000_tp8", FLAGS, 128, 8)["ttft_s"])  # 4.29
    assert abs(p["estimate"] / true_ratio - 1) < 0.05, (p["estimate"], true_ratio)
    assert p["verdict"] == "supported" and rec["backend"].startswith("sim")
