"""The known-schedule server: OpenAI streams of one token per event, and a truth log of every write.

Started as a real process through the launcher, measured by the framework's own client (no timed
assertions: the write times are compared with the schedule's order, not with a clock's speed).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import requests

from framework.core.spec import Workload
from framework.execution.client import run_workload
from framework.execution.launcher import ServerProcess, ServerSpec, free_port
from framework.servers.schedule.server import main


@pytest.fixture()
def server(tmp_path: Path):
    port = free_port()
    log = tmp_path / "truth.jsonl"
    argv = [sys.executable, "-m", "framework.servers.schedule", "--port", str(port), "--first-token-ms", "5",
            "--interval-ms", "1", "--truth-log", str(log)]
    with ServerProcess(ServerSpec(argv=argv, host="127.0.0.1", port=port, log_path=tmp_path / "server.log",
                                  ready_timeout_s=30)) as proc:
        yield f"http://127.0.0.1:{port}", log
        assert proc.proc is not None and proc.proc.poll() is None


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_every_token_is_one_event_and_the_truth_log_has_every_write(server, endpoint):
    url, log = server
    rows: list[dict] = []
    w = Workload(output_tokens=12, prompt_tokens=4, concurrency=3, prompt="text" if endpoint == "chat" else "ids",
                 endpoint=endpoint)
    run_workload(url, w, requests_n=6, warmup=0, seed=1, protocol="openai",
                 on_row=lambda i, un, row: rows.append({"index": i, **row}))
    measured = [r for r in rows if r["phase"] == "measured"]
    assert len(measured) == 6 and all(r["ok"] and r["completion_tokens"] == 12 for r in measured)
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    # the framework's plan index, from its header: every measured request is in the log
    assert {r["index"] for r in measured} <= {x["seq"] for x in lines}
    for x in lines:
        if x.get("cancelled"):  # a cool-down request the client cancelled when the window ended
            continue
        assert x["tokens"] == 12 and len(x["writes"]) == 12 and x["endpoint"] == endpoint
        assert x["writes"] == sorted(x["writes"]) and x["writes"][0] > x["received"]


def test_routes_and_a_whole_body_without_stream(server):
    url, _ = server
    assert requests.get(url + "/health", timeout=5).status_code == 200
    assert requests.get(url + "/v1/models", timeout=5).json()["data"][0]["id"] == "schedule"
    body = requests.post(url + "/v1/completions", json={"prompt": [1, 2], "max_tokens": 3}, timeout=5).json()
    assert body["usage"]["completion_tokens"] == 3 and body["choices"][0]["text"] == " t t t"
    assert requests.post(url + "/v1/completions", data=b"[1", timeout=5).status_code == 400
    assert requests.get(url + "/nope", timeout=5).status_code == 404


def test_bad_flags_exit_2(capsys):
    assert main(["--port", "1", "--tokens", "0"]) == 2
    assert "--tokens" in capsys.readouterr().err
