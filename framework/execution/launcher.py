"""Start, watch and stop one server process, whatever the backend.

The same code launches real SGLang and the simulator, so every end-to-end test exercises the
path a GPU run takes. Guarantees:

- the argv is executed directly (never through a shell) in a new process group, its output
  going to a log file;
- readiness means the backend's health route (`GET /health`, or `/v1/models` for servers
  without one) answered 200; a process that exits during start-up fails fast with its exit code
  and the last log lines; a start-up that takes too long fails clearly;
- the server's environment is the framework's minus the variables its backend would let
  override its flags (llama-cpp-python's `PORT`, `HOST`, ...), plus the configured ones;
- after a stop, `wait_released` waits until the process group is gone, the port is free and,
  where `nvidia-smi` exists, no process of the group holds GPU memory, so the next launch does
  not share the machine with the last one;
- stopping sends SIGTERM to the group, then SIGKILL after a grace period;
- a server that dies by SIGKILL while the kernel's OOM killer struck (the host's `oom_kill` count in
  /proc/vmstat rose during the launch) gets a line saying so appended to its log, so the failure is
  classified as host memory, not as a bare kill;
- no server outlives the framework: live servers are stopped at interpreter exit and on
  SIGTERM, the child gets PR_SET_PDEATHSIG where that is safe, and a tiny watchdog process kills
  the group if the framework dies by SIGKILL.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import requests

from framework.errors import LaunchError

READY_POLL_S = 0.05
STOP_GRACE_S = 10.0


@dataclass
class ServerSpec:
    argv: list[str]
    host: str
    port: int
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    env_unset: tuple[str, ...] = ()  # names dropped from the inherited environment (case-insensitive; `X*`: prefix)
    ready_timeout_s: float = 600.0
    health_path: str = "/health"
    api_key: str | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (the kernel's choice, so parallel jobs rarely collide)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def server_environ(environ: Mapping[str, str], unset: tuple[str, ...]) -> dict[str, str]:
    """The inherited environment without the names in `unset` (any case; a trailing `*` is a prefix)."""
    names = {u.upper() for u in unset if not u.endswith("*")}
    prefixes = tuple(u[:-1].upper() for u in unset if u.endswith("*"))
    return {k: v for k, v in environ.items()
            if k.upper() not in names and not (prefixes and k.upper().startswith(prefixes))}


OOM_KILL_NOTE = ("[framework] the server ended by SIGKILL, and the kernel's OOM killer killed {n} process(es) on "
                 "this host while it ran (/proc/vmstat oom_kill {before} -> {after})")


def oom_kills(vmstat: Path = Path("/proc/vmstat")) -> int | None:
    """How many processes the kernel's OOM killer has killed on this host since boot (None where unknown)."""
    try:
        for line in vmstat.read_text(encoding="ascii", errors="replace").splitlines():
            name, _, value = line.partition(" ")
            if name == "oom_kill" and value.strip().isdigit():
                return int(value)
    except OSError:
        pass
    return None


TAIL_BYTES = 256 * 1024  # a server can print a line of any length; the tail read is bounded
TAIL_LINE_CHARS = 1000


def log_tail(path: Path, lines: int = 20) -> list[str]:
    """The last `lines` lines of a log, from its last TAIL_BYTES, each cut to TAIL_LINE_CHARS."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - TAIL_BYTES))
            data = f.read()
    except OSError:
        return []
    all_lines = data.decode("utf-8", errors="replace").splitlines()
    if size > TAIL_BYTES and len(all_lines) > 1:
        all_lines = all_lines[1:]  # the first one was cut by the bounded read
    out = all_lines[-lines:]
    return [line if len(line) <= TAIL_LINE_CHARS else line[:TAIL_LINE_CHARS] + " [...]" for line in out]


ENDPOINT_PROBE_S = 10.0


def unreachable(base_url: str, timeout_s: float) -> str | None:
    """None when a server answers HTTP at `base_url` (any status), else why not, in one line."""
    try:
        requests.get(base_url + "/health", timeout=(timeout_s, timeout_s))
        return None
    except requests.Timeout:
        return f"{base_url} unreachable: no answer within {timeout_s:g} s"
    except requests.RequestException as exc:
        errno = re.search(r"\[Errno -?\d+\] ([^'\")]+)", str(exc))
        return f"{base_url} unreachable: {errno.group(1).strip() if errno else type(exc).__name__}"


_LIVE: dict[int, "ServerProcess"] = {}
_LIVE_LOCK = threading.Lock()


def _stop_all() -> None:
    with _LIVE_LOCK:
        servers = list(_LIVE.values())
    for server in servers:
        server.stop()


atexit.register(_stop_all)


# Signals received, in order. The handlers raise at whatever line runs when the signal lands; where that
# line swallows the exception (a finalizer, a library's cleanup), the run must still stop, and say so:
# `raise_if_signalled` raises again at the next trial row, and the CLI's exit code reports the signal.
_RECEIVED: list[int] = []


def received_signal() -> int | None:
    """The first stop signal this process received since its handlers were installed, or None."""
    return _RECEIVED[0] if _RECEIVED else None


def raise_if_signalled() -> None:
    """Raise again for a stop signal whose exception something swallowed, so the run does not go on."""
    signum = received_signal()
    if signum is None:
        return
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise SystemExit(128 + signum)


def install_signal_handlers() -> None:
    """Turn SIGTERM/SIGHUP into SystemExit and SIGINT into KeyboardInterrupt, so `finally` blocks stop the servers.

    SIGINT gets a handler of our own although Python's default raises KeyboardInterrupt too: with the
    default in place, `asyncio.run` (the client) swaps in one that only cancels the running task, and
    a workload that records a cancelled request as a row and returns would swallow the Ctrl-C; the
    run would go on measuring. A handler that raises leaves the interrupt to propagate.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    _RECEIVED.clear()  # a signal an earlier run in this process took is not this run's

    def _exit(signum: int, _frame: object) -> None:
        _RECEIVED.append(signum)
        raise SystemExit(128 + signum)

    def _interrupt(signum: int, _frame: object) -> None:
        _RECEIVED.append(signum)
        raise KeyboardInterrupt

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _exit)
    signal.signal(signal.SIGINT, _interrupt)


def _pdeathsig_preexec() -> None:  # runs in the child between fork and exec
    libc = ctypes.CDLL(None, use_errno=True)
    PR_SET_PDEATHSIG = 1
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class ServerProcess:
    """One launched server. Use as a context manager: `with ServerProcess(spec) as server: ...`."""

    def __init__(self, spec: ServerSpec) -> None:
        self.spec = spec
        self.proc: subprocess.Popen[bytes] | None = None
        self.watchdog: subprocess.Popen[bytes] | None = None
        self.startup_s: float | None = None
        self.ready = False
        self._group: set[int] = set()
        self._oom_kills: int | None = None  # the host's OOM-kill count at start

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> "ServerProcess":
        spec = self.spec
        spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._oom_kills = oom_kills()
        # FRAMEWORK_SECRET_* carry redacted secrets to Hydra, never to a server; env_unset: the backend's overrides
        env = {**server_environ(os.environ, ("FRAMEWORK_SECRET_*", *spec.env_unset)), **spec.env}
        use_pdeathsig = sys.platform == "linux" and threading.current_thread() is threading.main_thread()
        with open(spec.log_path, "ab") as log:
            self.proc = subprocess.Popen(  # noqa: S603 - an argv list, never a shell
                spec.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=_pdeathsig_preexec if use_pdeathsig else None,  # noqa: PLW1509
            )
        with _LIVE_LOCK:
            _LIVE[self.proc.pid] = self
        self.watchdog = subprocess.Popen(  # noqa: S603
            [sys.executable, "-m", "framework.execution.watchdog", str(os.getpid()), str(self.proc.pid)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        return self

    def wait_ready(self) -> float:
        """Poll the health endpoint until 200; return the start-up time in seconds."""
        assert self.proc is not None
        t0 = time.monotonic()
        url = self.spec.base_url + self.spec.health_path
        session = requests.Session()
        while True:
            code = self.proc.poll()
            if code is not None:
                self._note_oom_kill(code)
                tail = log_tail(self.spec.log_path)
                self._forget()
                raise LaunchError(f"server exited with code {code} during start-up", code, tail)
            try:
                if session.get(url, timeout=2.0).status_code == 200:
                    self.startup_s = time.monotonic() - t0
                    self.ready = True
                    return self.startup_s
            except requests.RequestException:
                pass
            if time.monotonic() - t0 > self.spec.ready_timeout_s:
                tail = log_tail(self.spec.log_path)
                self.stop()
                raise LaunchError(
                    f"server not ready after {self.spec.ready_timeout_s:.0f} s (no 200 from {url})", None, tail,
                    timed_out=True,
                )
            time.sleep(READY_POLL_S)

    def stop(self, grace_s: float = STOP_GRACE_S) -> int | None:
        """SIGTERM the process group, SIGKILL it after `grace_s`; returns the exit code."""
        proc = self.proc
        if proc is None:
            return None
        self._group |= set(group_pids(proc.pid)) | {proc.pid}
        if proc.poll() is None:
            _signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                _signal_group(proc.pid, signal.SIGKILL)
                proc.wait()
        _signal_group(proc.pid, signal.SIGKILL)  # stragglers that ignored SIGTERM
        self._forget()
        return proc.returncode

    def exited_on_its_own(self, wait_s: float = 0.0) -> int | None:
        """The exit code if the server died by itself (before `stop`), else None.

        `wait_s` > 0 gives a server that may be dying a moment to finish: a process that calls `exit` closes
        its sockets (the client sees a reset) before its parent can reap it, so a bare `poll` races the crash.
        """
        if self.proc is None:
            return None
        if wait_s > 0:
            try:
                code: int | None = self.proc.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                return None
        else:
            code = self.proc.poll()
        if code is not None:
            self._note_oom_kill(code)
        return code

    def _note_oom_kill(self, code: int) -> None:
        """After a death by SIGKILL: append OOM_KILL_NOTE to the log if the host's OOM-kill count rose meanwhile."""
        after = oom_kills()
        if code != -signal.SIGKILL or self._oom_kills is None or after is None or after <= self._oom_kills:
            return
        note = OOM_KILL_NOTE.format(n=after - self._oom_kills, before=self._oom_kills, after=after)
        self._oom_kills = after  # noted once
        try:
            with open(self.spec.log_path, "a", encoding="utf-8") as log:
                log.write("\n" + note + "\n")
        except OSError:
            pass

    def wait_released(self, timeout_s: float = 60.0) -> "Release":
        """After `stop`: wait until the group is gone, the port is free and the group's GPU memory is released."""
        assert self.proc is not None
        return wait_released(self.proc.pid, self.spec.host, self.spec.port, self._group, timeout_s)

    def _forget(self) -> None:
        if self.proc is not None:
            with _LIVE_LOCK:
                _LIVE.pop(self.proc.pid, None)
        if self.watchdog is not None and self.watchdog.poll() is None:
            self.watchdog.kill()
            self.watchdog.wait()

    def __enter__(self) -> "ServerProcess":
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass(frozen=True)
class Release:
    """How long the machine took to be free of a stopped server, and what was still held at the deadline."""

    waited_s: float
    group_gone: bool
    port_free: bool
    gpu_released: bool | None  # None: no nvidia-smi on this machine

    def as_dict(self) -> dict[str, object]:
        return {"waited_s": round(self.waited_s, 4), "group_gone": self.group_gone, "port_free": self.port_free,
                "gpu_released": self.gpu_released}


def group_pids(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group."""
    import psutil

    out = []
    for p in psutil.process_iter(["pid", "status"]):
        try:
            if p.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(p.info["pid"]) == pgid:
                out.append(p.info["pid"])
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return out


def port_is_free(host: str, port: int) -> bool:
    """Whether a server could bind the port now (with SO_REUSEADDR, as servers do)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def gpu_pids() -> set[int] | None:
    """PIDs holding GPU memory (`nvidia-smi --query-compute-apps`), or None without nvidia-smi."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return {int(x) for x in out.stdout.split() if x.strip().isdigit()}


def wait_released(pgid: int, host: str, port: int, pids: set[int], timeout_s: float = 60.0,
                  poll_s: float = 0.05) -> Release:
    """Poll until the group has no live process, the port binds and none of `pids` holds GPU memory."""
    t0 = time.monotonic()
    gpu_check = gpu_pids() is not None
    while True:
        gone = not group_pids(pgid)
        free = port_is_free(host, port)
        held = gpu_pids() if gpu_check else None
        gpu_ok = None if held is None else not (held & pids)
        if (gone and free and gpu_ok is not False) or time.monotonic() - t0 > timeout_s:
            return Release(time.monotonic() - t0, gone, free, gpu_ok)
        time.sleep(poll_s)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
