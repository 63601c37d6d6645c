"""End to end on CPU: `python -m framework run ... backend=gpu` launches the GPU server, measures, records."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch", reason="the GPU server needs torch (pip install -e '.[gpu]')")

from cli_helpers import ROOT, framework, ledger_records  # noqa: E402


@pytest.mark.e2e
def test_run_with_the_gpu_backend_records_a_gpu_verdict(workdir):
    (workdir / "e").mkdir()
    (workdir / "h").mkdir()
    (workdir / "e" / "tiny_cpu.yaml").write_text(
        "name: tiny_cpu\nflags: gpu\nmodel_path: tiny\ntp_size: 1\n"
        "server_args: [--context-length, '64', --device, cpu, --speculative-accept-rate, '0.6']\n"
        "workload: {prompt_tokens: 16, output_tokens: 6, concurrency: 1}\n")
    aa = (ROOT / "hypotheses" / "gpu_aa.yaml").read_text().replace("experiment: gpu_llama1b_tp1",
                                                                    "experiment: tiny_cpu")
    (workdir / "h" / "gpu_aa.yaml").write_text(aa)
    p = framework("run", "hypothesis=gpu_aa", "backend=gpu", "paths.hypotheses=h", "paths.experiments=e",
                  "design.launches=2", "design.requests=2", "design.warmup=0", "report=false", cwd=workdir)
    assert p.returncode == 0, p.stdout + p.stderr
    (record,) = [r for r in ledger_records(workdir / "verdicts.jsonl") if r.get("kind") == "verdict"]
    assert record["backend"] == "gpu"
    info = record["environment"]["server"]["server_args"]
    assert info["backend"] == "gpu" and info["hardware"]["torch"] and info["gpu_server"]["weights"] == "random, seeded"
    rows = [json.loads(line) for line in next(workdir.glob("outputs/*/*/trials.jsonl")).read_text().splitlines()]
    assert sum(r["kind"] == "launch" and r["ok"] for r in rows) == 4
    assert all(r["ok"] and r["completion_tokens"] == 6 for r in rows if r["kind"] == "request")
    assert framework("audit", cwd=workdir).returncode == 0
