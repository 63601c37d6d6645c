"""A stop signal while the client's workers start: no worker is left behind to print a traceback (issue 31).

A SIGTERM that reached `run` between a worker's spawn and the parent's tracking of it left that worker
running after the parent had said "terminated by SIGTERM: ... resume with": it then failed to unpickle the
parent's shared lock (already gone) and printed a 13-line multiprocessing traceback. The signal is now held
off for those few instructions; the worker is stopped with the others and dies silently.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import multiprocessing.context as mpc, os, signal, socket, sys
    from framework.core.workload import Workload, make_plan
    from framework.execution.client.loops import _execute
    from framework.execution.client.workers import run_workers
    from framework.execution.launcher import install_signal_handlers

    srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(64)  # accepts, never answers
    install_signal_handlers()
    real, spawned = mpc.SpawnProcess._Popen, []

    def popen(process):  # the signal arrives right after worker K was spawned, before run_workers tracks it
        p = real(process)
        spawned.append(p)
        if len(spawned) == int(sys.argv[1]):
            os.kill(os.getpid(), signal.{signal})
        return p

    mpc.SpawnProcess._Popen = staticmethod(popen)
    w = Workload(concurrency=4, prompt_tokens=8, output_tokens=4)
    try:
        run_workers(make_plan(w, requests_n=8, warmup=0, seed=1), 4, f"http://127.0.0.1:{{srv.getsockname()[1]}}", w,
                    "generate", None, 1.0, None, lambda *a: None, _execute)
    finally:
        print("parent: stopped", file=sys.stderr, flush=True)
""")


@pytest.mark.parametrize("worker,signal,code", [(1, "SIGTERM", 143), (3, "SIGTERM", 143), (2, "SIGHUP", 129)])
def test_a_stop_signal_while_workers_start_leaves_no_worker_and_no_traceback(worker, signal, code):
    # stderr is read to its end: a worker left behind keeps it open, and what it prints later is read too
    p = subprocess.run([sys.executable, "-c", SCRIPT.format(signal=signal), str(worker)], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == code, p.stderr
    assert p.stderr.strip().splitlines() == ["parent: stopped"], p.stderr
