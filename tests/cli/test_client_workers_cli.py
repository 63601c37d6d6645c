"""`client.workers` through `python -m framework run`: refused when bad, recorded when used, and no worker
outlives a run that is killed."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import psutil
import pytest
import yaml
from cli_helpers import ROOT, framework, ledger_records, no_servers_left, run_env


def write_hypothesis(workdir, requests: int, launches: int = 1) -> list[str]:
    """A one-condition hypothesis at 8 closed-loop streams on the sim; the command line's paths to it."""
    hyp = workdir / "hyp"
    hyp.mkdir(exist_ok=True)
    (hyp / "w.yaml").write_text(yaml.safe_dump({
        "name": "w", "statement": "The sim serves 8 streams.", "experiment": "rtx_pro_6000_tp8",
        "metric": "decode_tok_s",
        "factors": {"rig": {"reference": "here", "levels": {
            "here": {"workload": {"concurrency": 8, "prompt_tokens": 64, "output_tokens": 32}}}}},
        "predictions": [{"id": "serves", "kind": "launches", "where": {"rig": "here"}, "expect": "starts"}],
        "design": {"launches": launches, "requests": requests, "warmup": 1, "seed": 3}}))
    return ["hypothesis=w", f"paths.hypotheses={hyp}", f"paths.experiments={ROOT / 'experiments'}", "progress=false",
            "report=false"]


@pytest.mark.parametrize("value", ["0", "-2", "many", "1.5", "9999"])
def test_a_bad_worker_count_is_one_line_exit_2_before_anything_starts(workdir, value):
    out = framework("run", *write_hypothesis(workdir, 8), f"client.workers={value}", cwd=workdir)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-2000:]
    line = out.stderr.strip()
    assert "client.workers" in line and "auto" in line and len(line.splitlines()) == 1, line
    assert not (workdir / "outputs").exists() and not (workdir / "verdicts.jsonl").exists()


@pytest.mark.e2e
def test_a_run_on_two_workers_records_them_and_writes_the_rows_one_worker_would(workdir):
    out = framework("run", *write_hypothesis(workdir, 8, launches=2), "client.workers=2", cwd=workdir)
    assert out.returncode == 0, out.stderr[-3000:]
    (record,) = [r for r in ledger_records(workdir / "verdicts.jsonl") if r["kind"] == "verdict"]
    assert record["verdict"] == "supported" and record["config"]["client"]["workers"] == 2
    attempts = record["analysis"]["launch_attempts"]
    assert len(attempts) == 2 and all(a["client_workers"] == 2 for a in attempts.values())
    assert all(w["client"]["workers"] == 2 for w in record["analysis"]["workloads"].values())
    run_dir = next((workdir / "outputs").glob("*/*"))
    rows = [json.loads(x) for x in (run_dir / "trials.jsonl").read_text().splitlines()]
    launches = [r for r in rows if r["kind"] == "launch"]
    assert [r["client_workers"] for r in launches] == [2, 2]
    for launch in launches:
        requests = [r for r in rows if r["kind"] == "request" and r["launch_id"] == launch["launch_id"]]
        indices = sorted(r["index"] for r in requests)
        assert indices == list(range(len(indices))) and len(indices) >= 16  # every request once, none lost
        assert all(r["trial_id"] == f"{launch['launch_id']}-q{r['index']}" for r in requests)
        assert all(r["ok"] for r in requests if r["phase"] != "cooldown")
    assert framework("audit", cwd=workdir).returncode == 0
    assert no_servers_left(workdir)


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _workers(procs: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for p in procs:
        try:
            if "multiprocessing" in " ".join(p.cmdline()):
                out.append(p)
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            continue
    return out


@pytest.mark.e2e
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_no_worker_outlives_a_killed_run(workdir, signum):
    argv = [sys.executable, "-m", "framework", "run", *write_hypothesis(workdir, 4000), "client.workers=2"]
    proc = subprocess.Popen(argv, cwd=workdir, env=run_env(workdir), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        seen: list[psutil.Process] = []
        while time.monotonic() < deadline and proc.poll() is None:
            family = _descendants(proc.pid)
            if len(_workers(family)) >= 2 and (workdir / "outputs").exists() and any(
                    '"kind":"request"' in p.read_text() for p in (workdir / "outputs").glob("*/*/trials.jsonl")):
                seen = family  # the workers are measuring: every process the run started so far
                break
            time.sleep(0.2)
        assert seen, "the run never started its workers"
        proc.send_signal(signum)
        proc.wait(60)
        gone, alive = psutil.wait_procs(seen, timeout=30)
        assert not alive, [p.cmdline() for p in alive]
        assert no_servers_left(workdir)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
