"""The endpoint backend measures a running server; SIGTERM to the framework stops its server."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
from cli_helpers import framework, ledger_records, no_servers_left, own_servers, run_env, starts_hypothesis

from framework.execution.launcher import ServerProcess, ServerSpec, free_port

pytestmark = pytest.mark.e2e  # whole runs over real processes, 2-5 s each: the e2e tier

SINGLE = starts_hypothesis(
    "endpoint_smoke", "The running server starts and serves.", "rtx_pro_6000_tp8",
    launches=2, requests=2)


def test_endpoint_backend_measures_a_server_it_did_not_start(workdir):
    hyp = workdir / "hyp"
    hyp.mkdir()
    (hyp / "endpoint_smoke.yaml").write_text(SINGLE)
    port = free_port()
    # seeded: unseeded (os.urandom), 3% of servers draw the profile's slow launch (-8%, mean ~85.5), as CI once did
    argv = [sys.executable, "-m", "framework.servers.sim", "--model-path", "m", "--tp-size", "8", "--port", str(port),
            "--sim-speedup", "20", "--random-seed", "1"]
    with ServerProcess(ServerSpec(argv, "127.0.0.1", port, workdir / "sim.log", ready_timeout_s=60)) as server:
        out = framework("run", "hypothesis=endpoint_smoke", f"paths.hypotheses={hyp}", "backend=endpoint",
                        f"backend.url=http://127.0.0.1:{port}", cwd=workdir)
        assert server.proc.poll() is None, "the endpoint backend must not stop a server it did not start"
    assert out.returncode == 0, out.stderr[-2000:]
    record = ledger_records(workdir / "verdicts.jsonl")[-1]
    # the server is the simulator: the verdict says so, and its reported speed-up sets the clock
    assert record["backend"] == "sim" and record["environment"]["launcher"] == "endpoint"
    assert record["verdict"] == "supported"
    (cond,) = record["conditions"]
    assert 88 < cond["metric"]["mean"] < 98  # on the sim's model clock: neither load nor speed-up moves it


def test_endpoint_refuses_multi_condition_hypotheses(workdir):
    out = framework("run", "hypothesis=eagle3_allreduce", "backend=endpoint", "backend.url=http://127.0.0.1:9",
                    cwd=workdir)
    assert out.returncode == 2 and "endpoint" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize("sig,line,code", [(signal.SIGTERM, "terminated by SIGTERM", 143),
                                           (signal.SIGINT, "interrupted", 130)])
def test_a_stopped_framework_stops_its_server_and_says_where_to_resume(workdir, sig, line, code):
    proc = subprocess.Popen([sys.executable, "-m", "framework", "run", "hypothesis=eagle3_allreduce",
                             "design.launches=2", "backend.speedup=2", f"hydra.run.dir={workdir / 'run'}"],
                            cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=run_env(workdir))
    trials = workdir / "run" / "trials.jsonl"

    def measuring() -> bool:  # a server is up and its launch row written: the signal lands in the workload
        return bool(own_servers(workdir)) and trials.exists() and '"kind":"launch"' in trials.read_text()

    deadline = time.monotonic() + 120
    while not measuring() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert measuring(), "no server was started"
    proc.send_signal(sig)
    err = proc.communicate(timeout=60)[1]
    assert no_servers_left(workdir)
    assert (workdir / "run" / "trials.jsonl").exists()
    assert proc.returncode == code
    assert f"{line}: servers stopped; resume with resume={workdir / 'run'}" in err, err[-2000:]


def test_endpoint_without_url_is_refused_before_anything_starts(workdir):
    hyp = workdir / "hyp"
    hyp.mkdir()
    (hyp / "endpoint_smoke.yaml").write_text(SINGLE)
    out = framework("run", "hypothesis=endpoint_smoke", f"paths.hypotheses={hyp}", "backend=endpoint", cwd=workdir)
    assert out.returncode == 2, out.stdout[-2000:]
    (line,) = out.stderr.strip().splitlines()
    assert "backend.url" in line and "Traceback" not in out.stderr
    assert not (workdir / "outputs").exists() and not (workdir / "verdicts.jsonl").exists()


def test_an_unreachable_endpoint_records_inconclusive_and_exits_non_zero(workdir):
    hyp = workdir / "hyp"
    hyp.mkdir()
    (hyp / "endpoint_smoke.yaml").write_text(SINGLE)
    port = free_port()  # nothing listens there
    out = framework("run", "hypothesis=endpoint_smoke", f"paths.hypotheses={hyp}", "backend=endpoint",
                    f"backend.url=http://127.0.0.1:{port}", cwd=workdir)
    assert out.returncode == 3, out.stderr[-2000:]
    assert "no data" in out.stderr and "never reachable" in out.stderr and "Traceback" not in out.stderr
    record = ledger_records(workdir / "verdicts.jsonl")[-1]
    assert record["verdict"] == "inconclusive"
    (p,) = record["predictions"]
    assert p["verdict"] == "inconclusive" and "unreachable" in p["reason"]
    assert framework("audit", cwd=workdir).returncode == 0
