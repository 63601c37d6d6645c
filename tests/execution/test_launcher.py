"""The launcher against a stand-in process: readiness, fail-fast, timeout, teardown, no orphans."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from framework.errors import LaunchError
from framework.execution import launcher
from framework.execution.launcher import ServerProcess, ServerSpec, free_port

FAKE = str(Path(__file__).parent.parent / "fixtures" / "fake_server.py")
HOLD = str(Path(__file__).parent.parent / "fixtures" / "hold_server.py")


def spec(tmp_path: Path, *extra: str, timeout: float = 30.0) -> ServerSpec:
    port = free_port()
    return ServerSpec([sys.executable, FAKE, "--port", str(port), *extra], "127.0.0.1", port,
                      tmp_path / "server.log", ready_timeout_s=timeout)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0); it is dead for our purpose
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def wait_dead(pid: int, within: float = 30.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_waits_for_health_then_stops(tmp_path):
    with ServerProcess(spec(tmp_path, "--ready-after", "0.5")) as server:
        assert server.startup_s is not None and server.startup_s >= 0.5
        pid = server.proc.pid
        assert alive(pid)
    assert wait_dead(pid)
    assert "serving" in (tmp_path / "server.log").read_text()


def test_exit_during_startup_fails_fast_with_code_and_log(tmp_path):
    # fast = on the exit itself, not at the ready timeout (a wall-clock bound would depend on load)
    with pytest.raises(LaunchError) as info:
        with ServerProcess(spec(tmp_path, "--exit-code", "3", timeout=600.0)):
            pass
    assert info.value.exit_code == 3 and "exited with code 3 during start-up" in info.value.message
    assert any("told to fail" in line for line in info.value.log_tail)


def test_not_ready_in_time_is_a_clear_error_and_the_server_is_stopped(tmp_path):
    s = spec(tmp_path, "--ready-after", "60", timeout=1.0)
    server = ServerProcess(s)
    with pytest.raises(LaunchError, match="not ready after"):
        with server:
            pass
    assert wait_dead(server.proc.pid)


def test_stop_kills_the_whole_group_even_if_sigterm_is_ignored(tmp_path):
    server = ServerProcess(spec(tmp_path, "--child", "--ignore-term")).start()
    server.wait_ready()
    time.sleep(0.2)
    child_line = next(ln for ln in (tmp_path / "server.log").read_text().splitlines() if ln.startswith("child pid"))
    child = int(child_line.split()[-1])
    server.stop(grace_s=0.5)
    assert wait_dead(server.proc.pid) and wait_dead(child)


def test_no_server_outlives_a_sigkilled_framework(tmp_path):
    holder = subprocess.Popen([sys.executable, HOLD, str(tmp_path / "held.log")], stdout=subprocess.PIPE, text=True)
    server_pid = int(holder.stdout.readline())
    assert alive(server_pid)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert wait_dead(server_pid), "the server survived its framework"


def test_the_next_launch_waits_until_the_group_and_port_are_released(tmp_path):
    server = ServerProcess(spec(tmp_path, "--child")).start()
    server.wait_ready()
    server.stop(grace_s=2)
    release = server.wait_released(timeout_s=20)
    assert release.group_gone and release.port_free and release.waited_s < 20
    assert release.gpu_released in (None, True)  # None where there is no nvidia-smi


def test_the_server_environment_drops_overriding_variables(tmp_path, monkeypatch):
    monkeypatch.setenv("PORT", "1")
    port = free_port()
    s = ServerSpec([sys.executable, "-c", "import os; print('PORT' in os.environ, os.environ['X'])"], "127.0.0.1",
                   port, tmp_path / "env.log", env={"X": "y"}, env_unset=("port",), ready_timeout_s=5)
    server = ServerProcess(s).start()
    server.proc.wait(timeout=10)
    server.stop()
    assert (tmp_path / "env.log").read_text().split() == ["False", "y"]


def test_the_log_tail_is_bounded_whatever_the_server_prints(tmp_path):
    from framework.execution.launcher import TAIL_LINE_CHARS, log_tail

    log = tmp_path / "server.log"
    log.write_text("start\n" + "x" * 5_000_000 + "\nRuntimeError: the last line\n")
    tail = log_tail(log)
    assert tail[-1] == "RuntimeError: the last line"
    assert all(len(line) <= TAIL_LINE_CHARS + 6 for line in tail)
    from framework.execution.failures import classify

    log.write_text("start\n" + "RuntimeError: " + "x" * 5_000_000 + "\n")
    assert len(classify(1, log_tail(log, 400)).message()) < 2 * TAIL_LINE_CHARS  # what the record keeps


def test_a_server_still_dying_counts_as_crashed_when_given_a_moment(tmp_path):
    # a process that is on its way out (sockets already closed, not yet reaped) polls as alive; the runner
    # waits for it after a lost connection, so the crash is recorded as a crash (the race CI once lost)
    port = free_port()
    dies = "import os, sys, time; print('up', flush=True); time.sleep(1.0); os._exit(1)"
    s = ServerSpec([sys.executable, "-c", dies], "127.0.0.1", port, tmp_path / "dying.log", ready_timeout_s=5)
    server = ServerProcess(s).start()
    try:
        assert server.exited_on_its_own() is None  # still running: a bare poll says alive
        assert server.exited_on_its_own(wait_s=30.0) == 1  # given the moment, it is seen to have crashed
    finally:
        server.stop()


def test_waiting_for_a_healthy_server_to_die_returns_none(tmp_path):
    with ServerProcess(spec(tmp_path)) as server:
        assert server.exited_on_its_own(wait_s=0.2) is None


def test_ctrl_c_is_not_swallowed_by_a_workload_that_records_cancelled_requests():
    # asyncio.run, under Python's default SIGINT handler, only cancels its task on Ctrl-C; the client
    # records a cancelled request as a row and returns, so the run went on measuring (exit 0, not 130)
    import asyncio

    from framework.execution.launcher import install_signal_handlers

    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}

    async def workload() -> str:
        asyncio.get_running_loop().call_later(0.05, os.kill, os.getpid(), signal.SIGINT)
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            return "a cancelled row, and on to the next launch"
        return "finished"

    try:
        install_signal_handlers()
        with pytest.raises(KeyboardInterrupt):
            asyncio.run(workload())
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        launcher._RECEIVED.clear()  # the signal this test sent is not a later test's run's


# Binds PORT from the environment over its --port flag, as llama-cpp-python's server does.
ENV_PORT_SERVER = """
import http.server, os, sys
port = int(os.environ.get("PORT") or sys.argv[sys.argv.index("--port") + 1])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers()
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


def test_a_command_server_binds_its_own_port_whatever_the_callers_environment(tmp_path, monkeypatch):
    # the case: `backend=command` inherited PORT, the server bound it and the framework waited 900 s
    from framework.core import design
    from framework.core.spec import Experiment, Hypothesis
    from framework.execution.backends import BackendSettings, server_spec

    decoy = free_port()
    monkeypatch.setenv("PORT", str(decoy))
    monkeypatch.setenv("UVICORN_PORT", str(decoy))
    h = Hypothesis.model_validate({"name": "h", "statement": "s", "experiment": "e", "factors": {"f": {
        "reference": "a", "levels": {"a": {}, "b": {}}}}, "predictions": [{"id": "p", "kind": "increase",
                                                                             "factor": "f", "level": "b"}]})
    backend = BackendSettings(name="command", argv=[sys.executable, "-c", ENV_PORT_SERVER, "--port", "{port}"],
                              ready_timeout_s=20)
    port = free_port()
    s = server_spec(backend, Experiment(name="e", model_path="m"), h, design.conditions(h)[0], port=port, seed=1,
                    log_path=tmp_path / "cmd.log")
    with ServerProcess(s) as server:
        assert server.ready and server.spec.port == port
    # a PORT the user sets on purpose (backend.env) still reaches the server
    kept = BackendSettings(name="command", argv=["srv", "{port}"], env={"PORT": "7"})
    assert server_spec(kept, Experiment(name="e", model_path="m"), h, design.conditions(h)[0], port=port, seed=1,
                       log_path=tmp_path / "x.log").env["PORT"] == "7"


def test_oom_kill_count_is_read_from_vmstat(tmp_path):
    from framework.execution.launcher import oom_kills

    vmstat = tmp_path / "vmstat"
    vmstat.write_text("nr_free_pages 12\noom_kill 5\n")
    assert oom_kills(vmstat) == 5
    assert oom_kills(tmp_path / "absent") is None


@pytest.mark.parametrize("rose, code, noted", [(True, -9, True), (False, -9, False), (True, 1, False)])
def test_a_sigkill_while_the_oom_killer_struck_is_noted_in_the_log(tmp_path, monkeypatch, rose, code, noted):
    from framework.execution import launcher
    from framework.execution.failures import classify
    from framework.execution.launcher import log_tail

    counts = iter([10, 11 if rose else 10])
    monkeypatch.setattr(launcher, "oom_kills", lambda: next(counts))
    body = "import os, signal; print('loading', flush=True); " + (
        "os.kill(os.getpid(), signal.SIGKILL)" if code == -9 else "raise SystemExit(1)")
    s = ServerSpec([sys.executable, "-c", body], "127.0.0.1", free_port(), tmp_path / "oom.log", ready_timeout_s=20)
    server = ServerProcess(s).start()
    with pytest.raises(LaunchError) as info:
        server.wait_ready()
    server.stop()
    assert info.value.exit_code == code
    failure = classify(code, log_tail(s.log_path))
    assert (failure.cls == "host_out_of_memory") is noted
    assert ("oom_kill 10 -> 11" in failure.line) is noted


def test_a_server_killed_after_a_start_up_warning_shows_the_signal(tmp_path, monkeypatch):
    """Issue 31: a real process prints vLLM's ulimit WARNING, then dies by SIGKILL; its evidence is the signal."""
    from framework.execution import launcher
    from framework.execution.backends import BACKENDS
    from framework.execution.failures import classify
    from framework.execution.launcher import log_tail

    monkeypatch.setattr(launcher, "oom_kills", lambda: None)  # whatever the host's OOM killer did meanwhile
    warning = ("WARNING 12-01 10:00:01 [utils.py:2273] Found ulimit of 1024 and failed to automatically increase "
               "with error current limit exceeds maximum limit.")
    body = f"import os, signal; print({warning!r}, flush=True); os.kill(os.getpid(), signal.SIGKILL)"
    s = ServerSpec([sys.executable, "-c", body], "127.0.0.1", free_port(), tmp_path / "v.log", ready_timeout_s=20)
    server = ServerProcess(s).start()
    with pytest.raises(LaunchError) as info:
        server.wait_ready()
    server.stop()
    failure = classify(info.value.exit_code, log_tail(s.log_path), BACKENDS["vllm"].failure_patterns,
                       summary=info.value.message)
    assert failure.cls == "killed" and failure.line.startswith("ended by SIGKILL (signal 9)"), failure
    assert "ulimit" not in failure.line
