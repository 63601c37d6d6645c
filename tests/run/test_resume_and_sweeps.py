"""Interrupted runs resume without losing work; multirun sweeps share one ledger; no orphans."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_helpers import framework, ledger_records, no_servers_left, run_env

from framework.run.writer import completed_launches
from framework.stats.extension import inflated_alpha


def rows(path: Path) -> list[dict]:
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return out


def complete_launches(trials: Path, requests: int) -> list[str]:
    """The launches a resume reuses, by the framework's own rule (a finished workload, whose `workload`
    row comes after its request rows: counting request rows raced a SIGKILL between the two)."""
    return list(completed_launches(rows(trials) if trials.exists() else [], requests))


@pytest.mark.e2e
def test_sigkill_then_resume_reuses_completed_launches(workdir):
    run1 = workdir / "run1"
    args = ["hypothesis=eagle3_allreduce", "design.launches=2", "design.sequential=false", "design.requests=1",
            "design.warmup=0", "backend.speedup=20"]
    proc = subprocess.Popen([sys.executable, "-m", "framework", "run", *args, f"hydra.run.dir={run1}"], cwd=workdir,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=run_env(workdir))
    deadline = time.monotonic() + 120
    while len(complete_launches(run1 / "trials.jsonl", 1)) < 3 and time.monotonic() < deadline:
        assert proc.poll() is None, "the run ended before it could be interrupted"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert no_servers_left(workdir), "a server outlived the killed framework"
    done_before = complete_launches(run1 / "trials.jsonl", 1)
    assert 3 <= len(done_before) < 8
    old_trials = {r["trial_id"] for r in rows(run1 / "trials.jsonl")
                  if r["kind"] == "request" and r["launch_id"] in done_before}

    run2 = workdir / "run2"
    out = framework("run", *args, f"resume={run1}", f"hydra.run.dir={run2}", cwd=workdir)
    assert out.returncode == 0, out.stderr[-3000:]
    assert no_servers_left(workdir)
    (record,) = [r for r in ledger_records(workdir / "verdicts.jsonl") if r["kind"] == "verdict"]
    new_rows = rows(run2 / "trials.jsonl")
    reused = {r["trial_id"] for r in new_rows if r["kind"] == "request" and r.get("reused_from")}
    assert old_trials <= reused, "completed launches must be reused with their trial ids"
    assert sum(r["kind"] == "launch" for r in new_rows if r["ok"]) == 8
    attempts = record["analysis"]["launch_attempts"]
    assert sum(1 for a in attempts.values() if a["reused_from"]) == len(done_before)
    assert record["analysis"]["resumed_from"].endswith("run1")
    assert [p["id"] for p in record["predictions"]] == [
        "neutral_for_baseline", "helps_eagle3", "helps_eagle3_more_than_baseline"]
    assert all(c["launches"]["ok"] == 2 for c in record["conditions"])

    # Resuming into the run's own directory reuses its launches without writing them again (it used to
    # append a second copy, double n, and make audit find a false verdict and a "changed" trials file).
    text = (run2 / "trials.jsonl").read_text()
    out = framework("run", *args, f"resume={run2}", f"hydra.run.dir={run2}", cwd=workdir)
    assert out.returncode == 0, out.stderr[-3000:]
    assert (run2 / "trials.jsonl").read_text() == text
    first, again = [r for r in ledger_records(workdir / "verdicts.jsonl") if r["kind"] == "verdict"]
    assert [p["ci"] for p in again["predictions"]] == [p["ci"] for p in first["predictions"]]
    assert again["analysis"]["extension"] is None  # same design: a re-analysis, not an extension
    assert framework("audit", cwd=workdir).returncode == 0

    # Extending it (2 -> 3 launches) under the fixed-sample rule is recorded as an unregistered extension with
    # its error inflation; the new rows are appended, and the earlier verdicts stay auditable on their prefix.
    out = framework("run", *args, "design.launches=3", f"resume={run2}", f"hydra.run.dir={run2}", cwd=workdir)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "UNREGISTERED EXTENSION" in out.stdout
    assert (run2 / "trials.jsonl").read_text().startswith(text)
    ext = ledger_records(workdir / "verdicts.jsonl")[-1]["analysis"]["extension"]
    assert ext["registered"] is False and ext["changed"]["launches"] == [2, 3] and 0.05 < ext["error_bound"] < 0.1
    assert "extension" in (run2 / "summary.md").read_text()
    audit = framework("audit", cwd=workdir)
    assert audit.returncode == 0, audit.stdout[-3000:]
    assert "UNREGISTERED EXTENSION" in audit.stdout

    # A second extension (3 -> 4) is bounded with the whole chain of looks, 2, 3 and 4 (rules version 2),
    # and a switch to anytime at an extension is not registered: it covers only the looks after it.
    out = framework("run", *args, "design.launches=4", f"resume={run2}", f"hydra.run.dir={run2}", cwd=workdir)
    assert out.returncode == 0, out.stderr[-3000:]
    ext = ledger_records(workdir / "verdicts.jsonl")[-1]["analysis"]["extension"]
    assert ext["looks"] == [2, 3, 4] and ext["error_bound"] > inflated_alpha(0.05, 3, 4)
    out = framework("run", *args, "design.launches=5", "design.analysis=anytime", "allow_amend=true",
                    f"resume={run2}", f"hydra.run.dir={run2}", cwd=workdir)
    assert out.returncode == 0, out.stderr[-3000:]
    ext = ledger_records(workdir / "verdicts.jsonl")[-1]["analysis"]["extension"]
    assert ext["registered"] is False and ext["changed"]["analysis"] == ["welch", "anytime"]
    assert ext["looks"] == [2, 3, 4, 5] and "UNREGISTERED EXTENSION" in out.stdout
    assert framework("audit", cwd=workdir).returncode == 0


@pytest.mark.e2e
def test_joblib_multirun_two_hypotheses_one_ledger_and_a_sweep_summary(workdir):
    sweep = workdir / "sweep"
    out = framework(
        "run",
        "-m",
        "hypothesis=eagle3_allreduce,torch_symm_mem",
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        "design.launches=1",
        "design.sequential=false",
        "design.requests=1",
        "design.warmup=0",
        "backend.speedup=20",
        f"hydra.sweep.dir={sweep}",
        cwd=workdir,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    verdicts = [r for r in ledger_records(workdir / "verdicts.jsonl") if r["kind"] == "verdict"]
    assert sorted(r["hypothesis"]["name"] for r in verdicts) == ["eagle3_allreduce", "torch_symm_mem"]
    summary = json.loads((sweep / "sweep_summary.json").read_text())
    assert [job["status"] for job in summary["jobs"]] == ["ok", "ok"]
    assert {job["hypothesis"] for job in summary["jobs"]} == {"eagle3_allreduce", "torch_symm_mem"}
    assert (sweep / "sweep_summary.md").read_text().strip()
    assert no_servers_left(workdir)
