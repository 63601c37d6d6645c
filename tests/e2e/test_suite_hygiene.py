"""The suite itself: reproducible property tests, and tests that see only their own servers (issue 15,
"a suite that is green anywhere")."""

import os
import signal
import subprocess
import sys

import psutil
from cli_helpers import ROOT, SERVER_TAG, no_servers_left, own_servers, run_env
from hypothesis import settings

from framework.execution.launcher import free_port


def test_property_tests_are_derandomized_without_a_database_or_deadline():
    assert settings.default.derandomize is True
    assert settings.default.database is None
    assert settings.default.deadline is None


def test_a_test_counts_its_own_servers_and_not_anyone_elses(tmp_path):
    """Another user's (or another test's) `framework.servers.sim` beside ours is not counted as ours."""
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"

    def sim(workdir):
        argv = [sys.executable, "-m", "framework.servers.sim", "--model-path", "m", "--port", str(free_port())]
        return subprocess.Popen(argv, cwd=ROOT, env=run_env(workdir), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)

    procs = [sim(mine), sim(theirs)]
    try:
        assert own_servers(mine) == {procs[0].pid}
        assert own_servers(theirs) == {procs[1].pid}
        assert psutil.Process(procs[0].pid).environ()[SERVER_TAG] == str(mine)  # the tag the server itself carries
    finally:
        for p in procs:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert no_servers_left(mine) and no_servers_left(theirs)
