"""A tiny launcher for the sim's own tests (the framework's launcher lives elsewhere; we do not depend on it)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
from cli_helpers import ROOT as REPO
from cli_helpers import stop_group


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Sim:
    proc: subprocess.Popen
    url: str
    log: Path

    def output(self) -> str:
        return self.log.read_text()


def spawn(args: list[str], log: Path) -> tuple[subprocess.Popen, int]:
    port = free_port()
    argv = [sys.executable, "-m", "framework.servers.sim", "--model-path", "m", "--tp-size", "8", "--port", str(port)]
    argv += args
    with open(log, "w") as fh:
        proc = subprocess.Popen(argv, cwd=REPO, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    return proc, port


def wait_ready(proc: subprocess.Popen, url: str, timeout: float = 30.0) -> list[int]:
    """Poll /health until 200; returns the status codes seen (0 = connection refused)."""
    seen: list[int] = []
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"sim exited with {proc.returncode}")
        try:
            code = requests.get(url + "/health", timeout=2).status_code
        except requests.ConnectionError:
            code = 0
        seen.append(code)
        if code == 200:
            return seen
        time.sleep(0.02)
    raise TimeoutError("sim not ready")


def stop(proc: subprocess.Popen) -> None:
    stop_group(proc, grace=10)


@pytest.fixture
def sim_factory(tmp_path):
    procs: list[subprocess.Popen] = []

    def make(*args: str) -> Sim:
        log = tmp_path / f"sim{len(procs)}.log"
        proc, port = spawn(list(args), log)
        procs.append(proc)
        url = f"http://127.0.0.1:{port}"
        wait_ready(proc, url)
        return Sim(proc, url, log)

    yield make
    for p in procs:
        stop(p)
