"""End to end: backend=sim refuses a hypothesis varying an unmodelled flag before any launch, runs it
with the override (verdicts marked), and launches with real SGLang tuning flags in the base args."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from cli_helpers import ROOT, framework, ledger_records

TUNING = ["--chunked-prefill-size", "4096", "--attention-backend", "fa3", "--max-running-requests", "32",
          "--schedule-policy", "lpm", "--kv-cache-dtype", "fp8_e4m3", "--context-length", "8192",
          "--enable-torch-compile", "--disable-radix-cache", "--mem-fraction-static", "0.85"]


def _project(workdir: Path) -> list[str]:
    exp = yaml.safe_load((ROOT / "experiments" / "rtx_pro_6000_tp8.yaml").read_text())
    exp["name"] = "tuned"
    exp["server_args"] = TUNING
    hyp = {"name": "mem_fraction", "statement": "mem fraction static does not change decode",
           "experiment": "tuned", "metric": "decode_tok_s",
           "factors": {"mem": {"reference": "high", "levels": {
               "high": {"server_args": ["--mem-fraction-static", "0.90"]},
               "low": {"server_args": ["--mem-fraction-static", "0.60"]}}}},
           "predictions": [{"id": "same", "kind": "equivalent", "factor": "mem", "level": "low", "margin": 0.03}],
           "design": {"launches": 1, "requests": 1, "warmup": 0, "seed": 3}}
    for kind, data in (("experiments", exp), ("hypotheses", hyp)):
        (workdir / kind).mkdir(exist_ok=True)
        (workdir / kind / f"{data['name']}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return ["hypothesis=mem_fraction", f"paths.hypotheses={workdir / 'hypotheses'}",
            f"paths.experiments={workdir / 'experiments'}", "backend.speedup=20"]


@pytest.mark.e2e
def test_refused_before_any_launch_then_run_with_the_override(workdir):
    args = _project(workdir)
    out = framework("run", *args, cwd=workdir)
    assert out.returncode == 2, out.stdout + out.stderr
    line = (out.stdout + out.stderr).strip().splitlines()[-1]
    assert "--mem-fraction-static" in line and "mem=high: 0.9, mem=low: 0.6" in line
    assert "backend=sglang" in line and "sim.allow_unmodelled=true" in line and "Traceback" not in out.stderr
    assert not (workdir / "verdicts.jsonl").exists() and not (workdir / "outputs").exists()
    val = framework("validate", str(workdir / "hypotheses" / "mem_fraction.yaml"), cwd=workdir)
    assert val.returncode == 2 and "--mem-fraction-static" in val.stdout + val.stderr

    out = framework("run", *args, "sim.allow_unmodelled=true", cwd=workdir)
    assert out.returncode in (0, 1, 3), out.stdout[-3000:] + out.stderr[-3000:]
    rec = ledger_records(workdir / "verdicts.jsonl")[-1]
    cov = rec["analysis"]["sim_coverage"]
    assert cov["override"] and cov["unmodelled_varied_flags"] == ["--mem-fraction-static"]
    assert "--chunked-prefill-size" in cov["unmodelled_constant"]  # the tuned base args launched, recorded
    assert all(c["launches"]["ok"] == 1 for c in rec["conditions"])
    marks = rec["predictions"][0]["marks"]
    assert any("NOT MODELLED" in m and "--mem-fraction-static" in m for m in marks)
    assert "NOT MODELLED" in " ".join(out.stdout.split())
    run_dir = Path(rec["run_dir"])
    assert "NOT MODELLED" in (run_dir / "summary.md").read_text()
