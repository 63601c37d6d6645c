"""The sweep summary: `summarize` on synthetic records, the files the callback writes, and the
callback inside a real Hydra multirun (a tiny app in a temporary directory)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cli_helpers import ROOT as REPO
from omegaconf import OmegaConf
from statsmodels.stats.multitest import multipletests

from framework.analysis.sweep import summarize
from framework.run.sweep import SweepSummary, expected_jobs, to_markdown, write_summary


def record(name: str, preds: list[tuple[str, str, float | None]], verdict: str = "supported",
           backend: str = "sim") -> dict:
    """A verdict record as the run writes it (only the keys the summary reads, plus a hash)."""
    return {
        "schema": "framework.verdict/1", "kind": "verdict",
        "hypothesis": {"name": name, "sha256": "0" * 64, "statement": "s"},
        "backend": backend, "verdict": verdict, "hash": f"hash-{name}",
        "predictions": [
            {"id": pid, "kind": "increase", "verdict": v, "estimate": 1.05, "ci": [1.01, 1.09],
             "p_value": p, "reason": "r"}
            for pid, v, p in preds
        ],
    }


RECORDS = [
    record("eagle3_allreduce", [("neutral_for_baseline", "supported", 0.0004),
                                ("helps_eagle3", "supported", 0.02),
                                ("launch_ok", "supported", None)]),
    record("torch_symm_mem", [("helps_eagle3", "refuted", 0.6)], verdict="refuted"),
    record("cuda13", [("starts", "supported", 0.03), ("faster", "supported", 0.011)]),
]
OVERRIDES = [["hypothesis=eagle3_allreduce", "design.launches=2"],
             ["hypothesis=torch_symm_mem", "design.launches=2"],
             ["hypothesis=cuda13", "design.launches=2"]]
P_FAMILY = [0.0004, 0.02, 0.6, 0.03, 0.011]  # every p-value, in job then prediction order


@pytest.mark.parametrize("method", ["holm", "fdr_bh"])
def test_adjusted_p_values_match_multipletests(method: str) -> None:
    s = summarize(RECORDS, OVERRIDES, method, 0.05)
    reject, p_adj, _, _ = multipletests(P_FAMILY, alpha=0.05, method=method)
    got = [(p["p_adjusted"], p["significant_adjusted"]) for r in s["jobs"] for p in r["predictions"]
           if p["p_value"] is not None]
    assert [g[0] for g in got] == pytest.approx(list(p_adj))
    assert [g[1] for g in got] == [bool(x) for x in reject]
    assert s["multiplicity"]["method"] == method
    assert s["multiplicity"]["family_size"] == 5


def test_holm_is_stricter_than_bh_and_only_downgrades_supported() -> None:
    holm = summarize(RECORDS, OVERRIDES, "holm", 0.05)
    bh = summarize(RECORDS, OVERRIDES, "fdr_bh", 0.05)
    # Holm: 0.0004*5=0.002 rejects; 0.011*4=0.044 rejects; 0.02*3=0.06 stops the step-down.
    verdicts = {(r["hypothesis"], p["id"]): p["adjusted_verdict"] for r in holm["jobs"] for p in r["predictions"]}
    assert verdicts[("eagle3_allreduce", "neutral_for_baseline")] == "supported"
    assert verdicts[("cuda13", "faster")] == "supported"
    assert verdicts[("eagle3_allreduce", "helps_eagle3")] == "inconclusive"
    assert verdicts[("cuda13", "starts")] == "inconclusive"
    assert verdicts[("torch_symm_mem", "helps_eagle3")] == "refuted"  # refuted is never changed
    assert verdicts[("eagle3_allreduce", "launch_ok")] == "supported"  # no p-value: outside the family
    assert holm["counts"]["predictions_adjusted"] == {"supported": 3, "refuted": 1, "inconclusive": 2}
    # BH at 0.05: every p <= 0.0375 survives (ranks 1-4), so nothing supported is downgraded.
    assert bh["counts"]["predictions_adjusted"] == bh["counts"]["predictions"] == \
        {"supported": 5, "refuted": 1, "inconclusive": 0}


@pytest.mark.parametrize("method", ["holm", "fdr_bh"])
def test_jobs_are_a_second_family_with_the_largest_p(method: str) -> None:
    s = summarize(RECORDS, OVERRIDES, method, 0.05)
    # eagle3_allreduce has a prediction without a p-value: outside the job family.
    jobs = {r["hypothesis"]: r for r in s["jobs"]}
    assert jobs["eagle3_allreduce"]["p_value"] is None and jobs["eagle3_allreduce"]["p_adjusted"] is None
    assert jobs["torch_symm_mem"]["p_value"] == 0.6 and jobs["cuda13"]["p_value"] == 0.03
    reject, p_adj, _, _ = multipletests([0.6, 0.03], alpha=0.05, method=method)
    assert [jobs["torch_symm_mem"]["p_adjusted"], jobs["cuda13"]["p_adjusted"]] == pytest.approx(list(p_adj))
    assert s["multiplicity"]["job_family_size"] == 2
    # Holm: 0.03*2 = 0.06 > 0.05; BH: max(0.03*2/1, ...) = 0.06 too -> cuda13 becomes inconclusive.
    assert jobs["cuda13"]["adjusted_verdict"] == "inconclusive"
    assert jobs["torch_symm_mem"]["adjusted_verdict"] == "refuted"
    assert jobs["eagle3_allreduce"]["adjusted_verdict"] == "supported"
    assert s["counts"]["job_verdicts_adjusted"] == {"supported": 1, "refuted": 1, "inconclusive": 1}


def test_rows_carry_job_overrides_and_estimates() -> None:
    s = summarize(RECORDS, OVERRIDES, "holm", 0.05)
    assert [r["job"] for r in s["jobs"]] == [0, 1, 2]
    first = s["jobs"][0]
    assert first["status"] == "ok" and first["hypothesis"] == "eagle3_allreduce" and first["backend"] == "sim"
    assert first["verdict"] == "supported" and first["overrides"] == OVERRIDES[0]
    assert first["record_hash"] == "hash-eagle3_allreduce"
    pred = first["predictions"][0]
    assert pred["estimate"] == 1.05 and pred["ci"] == [1.01, 1.09] and pred["p_value"] == 0.0004
    assert s["varying"] == ["hypothesis"]
    assert s["counts"]["job_verdicts"] == {"supported": 2, "refuted": 1, "inconclusive": 0}
    json.dumps(s)  # JSON-ready


def test_failed_job_is_a_row_and_outside_the_family() -> None:
    s = summarize([RECORDS[0], None], OVERRIDES[:2], "holm", 0.05, jobs=[0, 1], errors=[None, "boom"])
    failed = s["jobs"][1]
    assert failed["status"] == "failed" and failed["error"] == "boom"
    assert failed["hypothesis"] == "torch_symm_mem" and failed["predictions"] == []
    assert s["counts"]["failed"] == 1 and s["counts"]["ok"] == 1
    assert s["multiplicity"]["family_size"] == 2
    assert "## Failed jobs" in to_markdown(s)


def test_bad_arguments_are_rejected() -> None:
    with pytest.raises(ValueError, match="multiplicity"):
        summarize(RECORDS, OVERRIDES, "bonferonni", 0.05)
    with pytest.raises(ValueError, match="override lists"):
        summarize(RECORDS, OVERRIDES[:1], "holm", 0.05)
    with pytest.raises(ValueError, match="alpha"):
        summarize(RECORDS, OVERRIDES, "holm", 1.5)


def test_empty_sweep_has_an_empty_family() -> None:
    s = summarize([], [], "fdr_bh", 0.1)
    assert s["jobs"] == [] and s["multiplicity"]["family_size"] == 0


def make_job(sweep: Path, name: str, overrides: list[str], rec: dict | None, num: int) -> Path:
    job = sweep / name
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(overrides)))
    (job / ".hydra" / "hydra.yaml").write_text(OmegaConf.to_yaml({"hydra": {"job": {"num": num}}}))
    if rec is not None:
        (job / "verdict.json").write_text(json.dumps(rec))
    return job


def fake_sweep(tmp_path: Path) -> Path:
    sweep = tmp_path / "sweep"
    make_job(sweep, "0-eagle3_allreduce", OVERRIDES[0], RECORDS[0], 0)
    make_job(sweep, "1-torch_symm_mem", OVERRIDES[1], None, 1)  # failed: no verdict.json
    make_job(sweep, "10-cuda13", OVERRIDES[2], RECORDS[2], 10)  # numeric, not lexicographic, order
    (sweep / ".submitit" / "7_0" / ".hydra").mkdir(parents=True)  # ignored
    return sweep


def test_callback_writes_both_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sweep = fake_sweep(tmp_path)
    cfg = OmegaConf.create({"sweep": {"multiplicity": "fdr_bh", "alpha": 0.1},
                            "hydra": {"sweep": {"dir": str(sweep)}}})
    SweepSummary().on_multirun_end(config=cfg)
    data = json.loads((sweep / "sweep_summary.json").read_text())
    assert data["multiplicity"]["method"] == "fdr_bh" and data["multiplicity"]["alpha"] == 0.1
    assert [(r["job"], r["status"]) for r in data["jobs"]] == [(0, "ok"), (1, "failed"), (10, "ok")]
    assert data["jobs"][1]["hypothesis"] == "torch_symm_mem"
    md = (sweep / "sweep_summary.md").read_text()
    assert md.startswith("# Sweep summary") and "| 1 | failed | torch_symm_mem |" in md
    assert "neutral_for_baseline" in md
    assert "Sweep summary" in capsys.readouterr().out  # the rich table was printed


def test_callback_arguments_override_config(tmp_path: Path) -> None:
    sweep = fake_sweep(tmp_path)
    cfg = OmegaConf.create({"sweep": {"multiplicity": "fdr_bh"}, "hydra": {"sweep": {"dir": str(sweep)}}})
    SweepSummary(method="holm", alpha=0.01).on_multirun_end(config=cfg)
    data = json.loads((sweep / "sweep_summary.json").read_text())
    assert data["multiplicity"]["method"] == "holm" and data["multiplicity"]["alpha"] == 0.01


def test_expected_jobs_add_rows_for_jobs_without_a_directory(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    make_job(sweep, "0-a", ["hypothesis=a"], RECORDS[0], 0)
    s = write_summary(sweep, expected=[["hypothesis=a"], ["hypothesis=b"]])
    assert [(r["job"], r["status"], r["hypothesis"]) for r in s["jobs"]] == [(0, "ok", "eagle3_allreduce"),
                                                                            (1, "failed", "b")]
    assert "never started" in s["jobs"][1]["error"]


def test_expected_jobs_expands_like_the_basic_sweeper() -> None:
    cfg = OmegaConf.create({"hydra": {"sweeper": {"_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper",
                                                  "params": None},
                                      "overrides": {"task": ["hypothesis=a,b", "design.launches=2", "x=1,2"]}}})
    assert expected_jobs(cfg) == [["hypothesis=a", "design.launches=2", "x=1"],
                                  ["hypothesis=a", "design.launches=2", "x=2"],
                                  ["hypothesis=b", "design.launches=2", "x=1"],
                                  ["hypothesis=b", "design.launches=2", "x=2"]]
    assert expected_jobs(OmegaConf.create({"hydra": {"sweeper": {"_target_": "optuna"}}})) is None


TINY_APP = '''
import json, os
import hydra
from hydra.core.hydra_config import HydraConfig

@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg):
    if cfg.hypothesis == "broken":
        raise RuntimeError("server did not start")
    out = HydraConfig.get().runtime.output_dir
    rec = {"hypothesis": {"name": cfg.hypothesis}, "backend": "sim", "verdict": "supported",
           "predictions": [{"id": "p", "kind": "increase", "verdict": "supported", "estimate": 1.1,
                            "ci": [1.0, 1.2], "p_value": float(cfg.p)}]}
    with open(os.path.join(out, "verdict.json"), "w") as f:
        json.dump(rec, f)

if __name__ == "__main__":
    main()
'''

TINY_CONF = '''
hypothesis: a
p: 0.01
sweep:
  multiplicity: holm
  alpha: 0.05
hydra:
  sweep:
    subdir: ${hydra.job.num}-${hypothesis}
  callbacks:
    sweep_summary:
      _target_: framework.run.sweep.SweepSummary
'''


def run_tiny(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "conf").mkdir(exist_ok=True)
    (tmp_path / "conf" / "config.yaml").write_text(textwrap.dedent(TINY_CONF))
    (tmp_path / "app.py").write_text(textwrap.dedent(TINY_APP))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "app.py", "-m", *args, f"hydra.sweep.dir={tmp_path / 'sweep'}"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)


def test_callback_in_a_real_multirun(tmp_path: Path) -> None:
    proc = run_tiny(tmp_path, "hypothesis=a,b", "p=0.01,0.04")
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "sweep" / "sweep_summary.json").read_text())
    assert [r["overrides"] for r in data["jobs"]] == [["hypothesis=a", "p=0.01"], ["hypothesis=a", "p=0.04"],
                                                      ["hypothesis=b", "p=0.01"], ["hypothesis=b", "p=0.04"]]
    assert data["varying"] == ["hypothesis", "p"]
    # Holm over (0.01, 0.04, 0.01, 0.04): 0.04 and 0.04 adjust to 0.08 -> inconclusive
    assert data["counts"]["predictions_adjusted"] == {"supported": 2, "refuted": 0, "inconclusive": 2}
    assert data["counts"]["job_verdicts_adjusted"] == {"supported": 2, "refuted": 0, "inconclusive": 2}
    assert (tmp_path / "sweep" / "sweep_summary.md").exists()
    assert "Sweep summary" in proc.stdout


def test_summary_is_written_even_when_a_job_fails(tmp_path: Path) -> None:
    proc = run_tiny(tmp_path, "hypothesis=a,broken")
    assert proc.returncode != 0  # Hydra reports the failed job
    data = json.loads((tmp_path / "sweep" / "sweep_summary.json").read_text())
    assert [(r["hypothesis"], r["status"]) for r in data["jobs"]] == [("a", "ok"), ("broken", "failed")]
    assert "server did not start" in data["jobs"][1]["error"]


def test_a_sequential_job_enters_the_family_with_its_valid_p_value() -> None:
    """The naive fixed-sample p of a sequential stop is not a p-value under optional stopping (issue 16)."""
    seq = record("seq", [("faster", "supported", 0.011)])
    seq["predictions"][0]["details"] = {"p_sequential": 0.04}
    s = summarize([seq, RECORDS[1]], OVERRIDES[:2], "holm", 0.05)
    reject, p_adj, _, _ = multipletests([0.04, 0.6], alpha=0.05, method="holm")
    assert s["jobs"][0]["predictions"][0]["p_value"] == 0.04
    assert s["jobs"][0]["predictions"][0]["p_adjusted"] == pytest.approx(p_adj[0])


def test_a_job_that_measured_nothing_is_named_and_makes_the_sweep_exit_3(tmp_path: Path, monkeypatch,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    # joblib and SLURM jobs run in other processes: the sweep callback, in the parent, is what sees them
    from framework.run.outcomes import OUTCOMES

    monkeypatch.setattr(OUTCOMES, "no_data", [])
    empty = {**record("cuda13", [("p", "inconclusive", None)], verdict="inconclusive"), "run_dir": "runs/2",
             "analysis": {"details": {"no_data": {"0": "condition 0: 2 launches started but served no request"}}}}
    sweep = tmp_path / "sweep"
    make_job(sweep, "0-eagle3_allreduce", OVERRIDES[0], RECORDS[0], 0)
    make_job(sweep, "1-cuda13", OVERRIDES[2], empty, 1)
    cfg = OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep)}}})
    SweepSummary().on_multirun_end(config=cfg)
    rows = json.loads((sweep / "sweep_summary.json").read_text())["jobs"]
    assert [bool(r["no_data"]) for r in rows] == [False, True]
    assert OUTCOMES.no_data == ["runs/2"]
    assert "error: no data in job 1: condition 0: 2 launches started but served no request" in capsys.readouterr().err
