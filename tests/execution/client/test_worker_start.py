"""A client worker that cannot start names why: a script that starts the run at its top level (no `__main__`
guard) is re-run by each spawned worker, which Python stops with exit code 1 ("client worker 1 died (exit code
1)" before); it is now refused before any worker starts, with what to do. Real scripts, real processes."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from framework.execution.client.workers import _died
from framework.execution.launcher import ServerProcess, ServerSpec, free_port

ROOT = Path(__file__).resolve().parents[3]
SERVER = ROOT / "tests" / "fixtures" / "keepalive_server.py"

RUN = """
from framework.core.workload import Workload
from framework.execution.client import run_workload
from framework.execution.client.workers import WorkerError
def main():
    rows = []
    try:
        out = run_workload({url!r}, Workload(output_tokens=4, concurrency=4), requests_n=8, warmup=2, seed=1,
                           on_row=lambda i, w, r: rows.append(r), workers=2)
    except WorkerError as exc:
        print("ERROR", exc)
    else:
        print("OK", out["client"]["workers"], sum(r["ok"] for r in rows), out["client"]["connection_retries"],
              sum(r.get("retries", 0) for r in rows))
"""


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("ka") / "server.log"
    argv = [sys.executable, str(SERVER), "--port", str(port), "--keep-alive", "5"]
    with ServerProcess(ServerSpec(argv, "127.0.0.1", port, log, ready_timeout_s=60)) as server:
        yield server.spec.base_url


def _script(tmp_path: Path, body: str, guarded: bool) -> str:
    call = 'if __name__ == "__main__":\n    main()\n' if guarded else "main()\n"
    path = tmp_path / ("guarded.py" if guarded else "unguarded.py")
    path.write_text(textwrap.dedent(body) + call)
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    return done.stdout + done.stderr


def test_an_unguarded_script_is_told_what_to_do_before_any_worker_starts(tmp_path, url):
    out = _script(tmp_path, RUN.format(url=url), guarded=False)
    assert "ERROR client.workers=2 starts worker processes that re-import the script" in out, out
    assert "(unguarded.py)" in out and 'if __name__ == "__main__":' in out and "client.workers=1" in out
    assert "died" not in out and "bootstrapping" not in out  # refused in the parent: no worker ever ran


def test_a_guarded_script_runs_two_workers(tmp_path, url):
    out = _script(tmp_path, RUN.format(url=url), guarded=True)
    assert out.startswith("OK 2 "), out
    _, _, served, retries, counted = out.split()[:5]
    assert int(served) >= 8
    assert int(retries) == int(counted)  # the launch's count is its workers' rows' sum


def test_the_setting_is_refused_as_configuration_from_an_unguarded_script(tmp_path):
    body = """
    from framework.execution.client.workers import parse_workers
    def main():
        try:
            print("OK", parse_workers(2), parse_workers(1))
        except ValueError as exc:
            print("REFUSED", exc)
    """
    assert _script(tmp_path, body, guarded=True).startswith("OK 2 1")
    assert _script(tmp_path, body, guarded=False).startswith("REFUSED client.workers=2 starts worker processes")


def test_a_worker_that_went_away_says_how_and_when():
    assert "exited with code 1 before it was ready" in _died(1, 1, started=False)
    assert "__main__" in _died(1, 1, started=False)
    assert "was killed by signal 9 while it measured" in _died(0, -9, started=True)
