"""A two-job sweep of the real app through the submitit SLURM launcher, on a real SLURM cluster: the jobs
return their records and only the submitting process writes the ledger (framework/run/handoff.py).

Needs a reachable cluster with a `debug` partition, e.g. the single-node one of
`bash .ci/slurm/start.sh` (as root); skipped with the reason otherwise. The jobs run on the
cluster's node with `sys.executable` in the repository directory, so the node must share this
filesystem (the local cluster is this machine).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_helpers import ROOT as REPO

PARTITION = "debug"  # conf/hydra/launcher/slurm_local.yaml
HYPOTHESES = ("eagle3_allreduce", "torch_symm_mem")

pytestmark = pytest.mark.slurm


def _cluster_problem() -> str | None:
    """Why no SLURM cluster can take the jobs, or None when one can."""
    if shutil.which("sinfo") is None or shutil.which("sbatch") is None:
        return "no SLURM here (sinfo/sbatch not on PATH); start the local cluster with `bash .ci/slurm/start.sh`"
    try:
        proc = subprocess.run(["sinfo", "-h", "-p", PARTITION, "-o", "%T"], capture_output=True, text=True,
                              timeout=15)
    except subprocess.TimeoutExpired:
        return "the SLURM controller does not answer (sinfo timed out); run `bash .ci/slurm/start.sh`"
    if proc.returncode != 0:
        return f"the SLURM controller does not answer: {proc.stderr.strip() or proc.returncode}"
    states = {s.strip().rstrip("*~#$@") for s in proc.stdout.split()}
    if not states & {"idle", "mixed", "allocated", "completing"}:
        return f"no usable node in partition {PARTITION!r} (states: {sorted(states) or 'none'})"
    return None


@pytest.fixture(scope="module")
def slurm() -> None:
    problem = _cluster_problem()
    if problem:
        pytest.skip(problem)


@pytest.mark.e2e
@pytest.mark.timeout(900)
def test_two_job_sweep_runs_as_a_slurm_job_array(slurm: None, tmp_path: Path) -> None:
    ledger = tmp_path / "verdicts.jsonl"
    sweep = tmp_path / "sweep"
    cmd = [
        sys.executable,
        "-m",
        "framework",
        "run",
        "-m",
        f"hypothesis={','.join(HYPOTHESES)}",
        "hydra/launcher=slurm_local",
        f"ledger={ledger}",
        "design.launches=1",
        "design.sequential=false",
        "design.requests=1",
        "design.warmup=0",
        f"hydra.sweep.dir={sweep}",
    ]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=840)
    elapsed = time.monotonic() - t0
    logs = "\n".join(p.read_text(errors="replace")[-3000:] for p in sorted(sweep.glob(".submitit/*/*_log.*")))
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}\n{logs}"
    print(f"two-job SLURM sweep took {elapsed:.1f} s")

    # It went through SLURM, as one job array of two tasks.
    scripts = list(sweep.glob(".submitit/*/*_submission.sh"))
    assert len(scripts) == 1, scripts
    script = scripts[0].read_text()
    assert "#SBATCH --array=0-1%2" in script and f"#SBATCH --partition={PARTITION}" in script
    assert sys.executable in script  # the job ran this interpreter

    # Two verdict records, one per hypothesis, in the one ledger.
    lines = [json.loads(line) for line in ledger.read_text().splitlines() if line.strip()]
    verdicts = [r for r in lines if r.get("kind") == "verdict"]
    assert sorted(r["hypothesis"]["name"] for r in verdicts) == sorted(HYPOTHESES)
    assert all(r["verdict"] in ("supported", "refuted", "inconclusive") for r in verdicts)

    # Only the submitting process wrote the ledger: it registered both hypotheses before the array started
    # and appended the records the jobs returned; each job's verdict.json is the record as stored.
    assert [r["kind"] for r in lines] == ["registration", "registration", "verdict", "verdict"]
    started = min(r["started"] for r in verdicts)
    assert all(r["registered"] < started for r in lines if r["kind"] == "registration")
    job_logs = " ".join(" ".join(p.read_text(errors="replace").split()) for p in sweep.glob(".submitit/*/*_log.out"))
    assert job_logs.count("the process that submitted the sweep appends this record") == 2, job_logs[-3000:]
    jobs = [p.parent for p in sweep.glob("*/verdict.json")]
    assert len(jobs) == 2 and not list(sweep.rglob("ledger_pending.json"))
    assert sorted(json.loads((j / "verdict.json").read_text())["hash"] for j in jobs) == sorted(
        r["hash"] for r in verdicts)
    audit = subprocess.run([sys.executable, "-m", "framework", "audit", f"ledger={ledger}"], cwd=REPO,
                           capture_output=True, text=True, timeout=300)
    assert audit.returncode == 0, audit.stdout[-3000:] + audit.stderr[-2000:]

    # The sweep summary, written by the callback in the submitting process.
    summary = json.loads((sweep / "sweep_summary.json").read_text())
    assert [(j["status"], j["hypothesis"]) for j in summary["jobs"]] == [("ok", h) for h in HYPOTHESES]
    assert (sweep / "sweep_summary.md").exists()

    # Nothing of the array left in the queue (the .submitit folder is named after the array's job id).
    array_id = scripts[0].parent.name
    def left_in_queue() -> str:
        return subprocess.run(["squeue", "-h", "-j", array_id, "-t", "PENDING,RUNNING,COMPLETING", "-o", "%i %T"],
                              capture_output=True, text=True, timeout=15).stdout.strip()

    deadline = time.monotonic() + 60  # a finished job can show RUNNING a few seconds more on a loaded machine
    while (queue := left_in_queue()) and time.monotonic() < deadline:
        time.sleep(1)
    assert queue == "", queue


@pytest.mark.e2e
@pytest.mark.timeout(900)
def test_one_design_spread_over_nodes_merges_into_one_record(slurm: None, tmp_path: Path) -> None:
    """design.machines=2 with machine.slot=0,1 as a SLURM job array, then resume=[job0,job1]: one record whose
    launch rows name the node each ran on. The local cluster has one node (localhost), so both jobs run on the
    same machine: this checks the plumbing (each slot's blocks, the node as the machine's label, the merge,
    audit) and that one node gives one machine id and "this machine", not that two nodes differ."""
    ledger = tmp_path / "verdicts.jsonl"
    sweep = tmp_path / "sweep"
    common = ["hypothesis=eagle3_allreduce", f"ledger={ledger}", "design.launches=2", "design.sequential=false",
              "design.requests=1", "design.warmup=0", "design.machines=2"]
    proc = subprocess.run([sys.executable, "-m", "framework", "run", "-m", *common, "machine.slot=0,1",
                           "hydra/launcher=slurm_local", f"hydra.sweep.dir={sweep}"],
                          cwd=REPO, capture_output=True, text=True, timeout=840)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    jobs = sorted(p.parent for p in sweep.glob("*/trials.jsonl"))
    assert len(jobs) == 2
    for slot, job in enumerate(jobs):
        launches = [json.loads(line) for line in (job / "trials.jsonl").read_text().splitlines()
                    if '"kind":"launch"' in line]
        assert {r["block"] % 2 for r in launches} == {slot} and len(launches) == 4
        assert all(r["machine"]["label"] for r in launches)  # SLURMD_NODENAME, set in every SLURM job
    merged = tmp_path / "merged"
    out = subprocess.run([sys.executable, "-m", "framework", "run", *common, f"resume=[{jobs[0]},{jobs[1]}]",
                          f"hydra.run.dir={merged}"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [json.loads(line) for line in (merged / "trials.jsonl").read_text().splitlines()]
    launches = [r for r in rows if r["kind"] == "launch"]
    assert len(launches) == 8 and len({r["machine"]["id"] for r in launches}) == 1  # one node: one machine
    record = [json.loads(line) for line in ledger.read_text().splitlines()][-1]
    assert record["population"]["scope"] == "this machine" and record["population"]["design_machines"] == 2
    assert "ran on 1" in record["population"]["note"]
    audit = subprocess.run([sys.executable, "-m", "framework", "audit", f"ledger={ledger}"], cwd=REPO,
                           capture_output=True, text=True, timeout=300)
    assert audit.returncode == 0, audit.stdout[-3000:]
