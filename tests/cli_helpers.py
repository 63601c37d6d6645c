"""Helpers for end-to-end tests: run `python -m framework` as a user would."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent

# Every framework a test starts carries this variable (set to the test's working directory) and
# passes it to the servers it launches, so a test counts only its own servers: other tests, other
# checkouts and other users on the machine run `framework.servers.sim` too.
SERVER_TAG = "FRAMEWORK_TEST_WORKDIR"


def run_env(workdir: Path, extra: dict | None = None) -> dict[str, str]:
    """The environment for a `python -m framework` a test starts in `workdir`."""
    return {**os.environ, "PYTHONPATH": str(ROOT), SERVER_TAG: str(workdir), **(extra or {})}


def framework(*args: str, cwd: Path, timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "framework", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
        env=run_env(cwd, env),
    )


def own_servers(workdir: Path) -> set[int]:
    """Live simulated servers started by frameworks this test ran in `workdir` (by their environment)."""
    pids = set()
    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            if "framework.servers.sim" not in (p.info["cmdline"] or []) or p.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if p.environ().get(SERVER_TAG) == str(workdir):
                pids.add(p.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue  # gone meanwhile, or another user's process: not ours
    return pids


def no_servers_left(workdir: Path, within: float = 30.0) -> bool:
    """True once none of this test's servers is alive (the launcher stops them within its grace)."""
    deadline = time.monotonic() + within
    while own_servers(workdir):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def ledger_records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def stop_group(proc: subprocess.Popen, grace: float) -> None:
    """Stop a server a test started in its own process group: SIGTERM, then SIGKILL after `grace` seconds."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def starts_hypothesis(name: str, statement: str, experiment: str, launches: int, requests: int) -> str:
    """A one-condition hypothesis (YAML) whose only prediction is that the server starts and serves."""
    return f"""\
name: {name}
statement: {statement}
experiment: {experiment}
factors:
  rig: {{reference: here, levels: {{here: {{}}}}}}
predictions:
  - {{id: serves, kind: launches, where: {{rig: here}}, expect: starts}}
design: {{launches: {launches}, requests: {requests}, warmup: 0}}
"""
