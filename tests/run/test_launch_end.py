"""A launch is ok only if it served its whole workload: `end_launch` records a crash after ready, cut
streams and hang-ups as a failed launch, with the class and the line that tells (the signal, not an
INFO line). The server, writer and progress are stand-ins; the e2e run is tests/e2e/test_losses_e2e.py."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from framework.execution.backends import BACKENDS
from framework.run import launch


class _Server:
    def __init__(self, log: Path, crashed: int | None) -> None:
        self.spec = SimpleNamespace(base_url="http://127.0.0.1:1", log_path=log)
        self.crashed = crashed

    def exited_on_its_own(self, wait_s: float = 0.0) -> int | None:
        return self.crashed

    def stop(self) -> int | None:
        return self.crashed if self.crashed is not None else 0

    def wait_released(self, timeout: float) -> SimpleNamespace:
        return SimpleNamespace(as_dict=lambda: {"waited_s": 0.0})


class _Recorder:
    def __init__(self) -> None:
        self.rows: list[dict] = []
        self.failed: list[str] = []

    def write(self, row: dict) -> None:
        self.rows.append(row)

    def launch_failed(self, cond: object, message: str) -> None:
        self.failed.append(message)


DEFINITION = {"hypothesis": "h" * 64, "experiment": "e" * 64, "design": "d" * 64}  # what the launch measured


def _end(tmp_path: Path, monkeypatch, crashed: int | None, lost: dict | None) -> tuple[dict, list[str]]:
    log = tmp_path / "server.log"
    log.write_text("INFO:     Uvicorn running on http://127.0.0.1:1\nINFO:     200 OK\n")
    monkeypatch.setattr(launch.client, "server_metrics", lambda *a: None)
    ctx = SimpleNamespace(backend=SimpleNamespace(table=BACKENDS["sim"], settle_timeout_s=1.0),
                          redactor=SimpleNamespace(scrub_file=lambda p: None), definition=DEFINITION)
    rec = _Recorder()
    launch.end_launch(ctx, _Server(log, crashed), {"format": 2, "launch_id": "L", "condition": 0, "levels": {}},
                      rec, rec, None, lost=lost)
    (row,) = rec.rows
    return row, rec.failed


def test_a_server_killed_while_measured_fails_its_launch_with_the_signal(tmp_path, monkeypatch):
    row, shown = _end(tmp_path, monkeypatch, crashed=-9, lost=None)
    assert not row["ok"] and row["crashed"] and row["failure_class"] == "crash_after_ready"
    assert row["definition"] == DEFINITION  # the launch end names its launch's definition (issue 31)
    assert row["failure_line"].startswith("ended by SIGKILL") and "INFO" not in row["error"]
    assert shown == [row["error"]]


@pytest.mark.parametrize("error_class,launch_class", [("stream_cut", "stream_cut"), ("connection", "hung_up"),
                                                      ("timeout", "stalled")])
def test_a_server_that_stayed_up_but_lost_requests_fails_its_launch(tmp_path, monkeypatch, error_class, launch_class):
    lost = {"sent": 9, "classes": {error_class: 2}, "first": (error_class, "stream ended before the request finished")}
    row, shown = _end(tmp_path, monkeypatch, crashed=None, lost=lost)
    assert not row["ok"] and not row["crashed"] and row["failure_class"] == launch_class
    assert row["failure_line"] == "stream ended before the request finished"
    assert f"2 of 9 requests lost while the server stayed up (2 {error_class})" in row["error"]
    assert row["requests_lost"] == {error_class: 2} and shown == [row["error"]]


def test_a_launch_whose_connections_were_refused_says_so(tmp_path, monkeypatch):
    lost = {"sent": 9, "classes": {"connection": 1, "connection_refused": 7},
            "first": ("connection", "ServerDisconnectedError: Server disconnected"),
            "first_refused": "ClientConnectorError: Cannot connect to host 127.0.0.1:1 [Connect call failed]"}
    row, shown = _end(tmp_path, monkeypatch, crashed=None, lost=lost)
    assert not row["ok"] and row["failure_class"] == "connection_refused"
    assert row["failure_line"].startswith("ClientConnectorError") and "7 connection(s) refused" in row["error"]
    assert row["requests_lost"] == {"connection": 1, "connection_refused": 7} and shown == [row["error"]]


def test_a_launch_that_served_everything_ends_ok(tmp_path, monkeypatch):
    row, shown = _end(tmp_path, monkeypatch, crashed=None, lost={"sent": 9, "classes": {}, "first": None})
    assert row["ok"] and row["failure_class"] is None and row["requests_lost"] is None and shown == []
