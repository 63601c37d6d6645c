"""A dead endpoint's launches say "connection refused" (issue 31), not "streams cut while the server stayed up".

A real simulator is started outside the framework (`backend=endpoint`) with a fault that kills it when its
third generation request arrives: that request loses its connection, and every later one finds nothing
listening. The launch is `connection_refused` and its line says the server is gone; the next launch finds
the endpoint unreachable, refused.
"""

from __future__ import annotations

import json
import sys

import pytest
from cli_helpers import framework, ledger_records, starts_hypothesis

from framework.execution.launcher import ServerProcess, ServerSpec, free_port

pytestmark = pytest.mark.e2e

HYP = starts_hypothesis("dead_endpoint", "The running server serves.", "rtx_pro_6000_tp8", launches=2, requests=8)


def test_a_dead_endpoints_launches_say_connection_refused(workdir):
    hyp = workdir / "hyp"
    hyp.mkdir()
    (hyp / "dead_endpoint.yaml").write_text(HYP)
    port = free_port()
    argv = [sys.executable, "-m", "framework.servers.sim", "--model-path", "m", "--tp-size", "8", "--port", str(port),
            "--sim-speedup", "20", "--random-seed", "1", "--sim-fault-crash-after-requests", "2"]
    with ServerProcess(ServerSpec(argv, "127.0.0.1", port, workdir / "sim.log", ready_timeout_s=60)) as server:
        out = framework("run", "hypothesis=dead_endpoint", f"paths.hypotheses={hyp}", "backend=endpoint",
                        f"backend.url=http://127.0.0.1:{port}", "hydra.run.dir=run", cwd=workdir)
        assert server.proc.poll() is not None, "the fault should have killed the endpoint"
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    rows = [json.loads(line) for line in (workdir / "run" / "trials.jsonl").read_text().splitlines()]
    requests = [r for r in rows if r["kind"] == "request"]
    classes = [r["error_class"] for r in requests if not r["ok"]]
    assert sum(r["ok"] for r in requests) == 2 and classes.count("connection_refused") >= 4, classes
    assert "stream_cut" not in classes
    (end,) = [r for r in rows if r["kind"] == "launch_end"]
    assert end["failure_class"] == "connection_refused", end
    assert "connection refused" in end["failure_line"] and "the server is gone, not cutting streams" in end["error"]
    assert "stayed up" not in end["error"]
    second = [r for r in rows if r["kind"] == "launch"][-1]
    assert not second["ok"] and "refused" in second["error"].lower(), second
    said = out.stdout + out.stderr
    assert "connection_refused: the server is gone, not cutting streams" in said, said[-3000:]
    summary = (workdir / "run" / "summary.md").read_text(encoding="utf-8")  # the console's table may cut it short
    assert "connection_refused: connection refused: the server was gone" in summary  # the analysis of what was lost
    record = ledger_records(workdir / "verdicts.jsonl")[-1]
    assert record["kind"] == "verdict"
    assert framework("audit", cwd=workdir).returncode == 0
