"""More than one core: a launch's plan executed by N worker processes sharing one schedule and one clock.

One asyncio loop on one core follows a few tens of thousands of tokens a second (issue 23); a GPU
host serving hundreds of streams sends more. As AIPerf and inference-perf do, the load is then
split over worker processes, each running the same loops (framework.execution.client.loops) on
its share:

- a closed loop's streams are split across the workers; which request a stream sends next, and
  when the measured window is over, is one state in shared memory (`SharedStreams`), so the
  requests go out in the plan's order exactly as one process would send them;
- an open loop's arrival schedule is dealt out in turn (arrival i to worker i mod N), so each
  arrival is sent by exactly one worker at its scheduled time;
- every worker stamps with the same clock: `time.perf_counter` is CLOCK_MONOTONIC on Linux, one
  clock for every process of the host. The parent waits until every worker has its connections
  open and its bodies encoded, then sends them one start instant on that clock (`START_LEAD_S`
  ahead), from which every `start_s` and schedule is counted;
- each row goes to the parent the moment its request ends, and the parent hands it to `on_row`
  as the one-process client does (same rows, same indices and ids; the order is the order rows
  reach the parent). The parent merges the workers' timing into one `client_health` (`merge_health`:
  lateness and loop lag over all; CPU, reads and bias of the worker that fared worst), which says how
  many workers ran (`workers`).

Workers never outlive the framework: they are daemonic children of the process that runs the
launch, which stops them (SIGTERM, then SIGKILL) whenever it leaves `run_workers`, by a signal's
exception too; each asks the kernel for SIGKILL if its parent dies (PR_SET_PDEATHSIG) and ignores
SIGINT (a Ctrl-C reaches the parent, which stops them). An open loop with a cap in flight
(`max_concurrency`) needs one semaphore in send order, so it runs on one worker (`worker_count`).

Workers are spawned, so each imports the parent's `__main__` script again: one that starts the run at its
top level (no `if __name__ == "__main__":`) would start it again in every worker. That is refused with what
to do before any worker starts (`unspawnable`, from `parse_workers` and `run_workers`), and a worker that
goes away without a word is reported with how (its exit code or signal) and when (before it was ready, or
while it measured).
"""

from __future__ import annotations

import ast
import asyncio
import ctypes
import math
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import time
import traceback
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from framework.core.workload import Endpoint, Plan, PlannedRequest, Workload
from framework.execution.client.selfcheck import BIAS_METRICS, CRITERION, client_health

AUTO = "auto"
MAX_WORKERS = 256
AUTO_MAX = 32  # `auto` never starts more (AIPerf's cap too)
AUTO_STREAMS_PER_WORKER = 16  # `auto`: a worker per 16 streams (one core keeps 64 timed within 1%, issue 23)
START_LEAD_S = 0.05  # the shared start is this far ahead of the moment every worker was ready
READY_TIMEOUT_S = 120.0  # a worker that has not opened its connections by then has failed
WINDOW_POLL_S = 0.002  # how often a worker looks whether another ended the measured window
STOP_GRACE_S = 2.0


# --------------------------------------------------------------------------- the setting


def parse_workers(value: Any) -> int | str:
    """`client.workers` as given: a whole number from 1 to MAX_WORKERS, or `auto`. Raises ValueError saying so."""
    if isinstance(value, str) and value.strip().lower() == AUTO:
        return AUTO
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_WORKERS:
        raise ValueError(f"a whole number from 1 to {MAX_WORKERS}, or {AUTO} (got {value!r})")
    if value > 1 and not shared_clock():
        raise ValueError(f"{value} workers need one monotonic clock for every process (Linux's CLOCK_MONOTONIC); "
                         f"this platform's perf_counter is {time.get_clock_info('perf_counter').implementation}: use 1")
    if value > 1 and (why := unspawnable(value)) is not None:
        raise ValueError(why)
    return value


def unguarded_main() -> str | None:
    """The script this process runs when each spawned worker would run it again (None: it would not).

    multiprocessing's spawn starts a worker by importing the parent's ``__main__`` script again (as
    ``__mp_main__``); a script that starts the run at its top level, not under ``if __name__ ==
    "__main__":``, would start it again in the worker, and Python stops that worker with exit code 1
    before it can say anything. A package's ``__main__`` (``python -m framework``), ``-c`` and an
    interactive session are never re-run. Guarded: any top-level ``if`` that tests ``__name__``.
    """
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and str(spec.name).endswith(".__main__"):
        return None
    path = getattr(spec, "origin", None) if spec is not None else getattr(main, "__file__", None)
    if not path or not str(path).endswith(".py"):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        if isinstance(node, ast.If) and any(isinstance(n, ast.Name) and n.id == "__name__"
                                            for n in ast.walk(node.test)):
            return None
    return str(path)


def unspawnable(n: int) -> str | None:
    """Why `n` worker processes cannot start from this process, in one line with what to do (None: they can)."""
    script = unguarded_main()
    if script is None:
        return None
    return (f"client.workers={n} starts worker processes that re-import the script that started the run "
            f"({os.path.basename(script)}), which runs the run again at its top level: start it under "
            f"`if __name__ == \"__main__\":`, or use client.workers=1")


def shared_clock() -> bool:
    """Whether `time.perf_counter` reads one clock for every process of the host (CLOCK_MONOTONIC)."""
    return "CLOCK_MONOTONIC" in time.get_clock_info("perf_counter").implementation


def usable_cores() -> int:
    """The cores this process may run on (its affinity, which a `taskset` or a cgroup narrows)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def worker_count(setting: int | str, workload: Workload, cores: int | None = None) -> int:
    """The workers a launch of `workload` uses: the setting, at most one per stream of a closed loop.

    `auto`: three quarters of the usable cores less one (the server and the parent need some), at most
    `AUTO_MAX` and one per `AUTO_STREAMS_PER_WORKER` streams; 1 on a 2-core machine. An open loop capped in
    flight (`max_concurrency`) runs on one worker (its one semaphore keeps the send order).
    """
    if workload.open_loop and workload.max_concurrency is not None:
        return 1
    if setting == AUTO:
        n = max(1, min(AUTO_MAX, int(0.75 * (cores or usable_cores())) - 1))
        if not workload.open_loop:
            n = min(n, math.ceil(workload.concurrency / AUTO_STREAMS_PER_WORKER))
    else:
        n = int(setting)
    return max(1, min(n, workload.concurrency) if not workload.open_loop else n)


# --------------------------------------------------------------------------- splitting the plan (pure)


def split_streams(streams: int, n: int) -> list[int]:
    """`streams` closed-loop streams over `n` workers, as evenly as they go (the first ones take one more)."""
    return [streams // n + (k < streams % n) for k in range(n)]


def split_arrivals(requests: list[PlannedRequest], n: int) -> list[list[PlannedRequest]]:
    """An open loop's arrivals dealt out in turn: each goes to exactly one worker, each worker's in order."""
    return [requests[k::n] for k in range(n)]


# --------------------------------------------------------------------------- the shared closed loop


class SharedStreams:
    """framework.execution.client.loops.Streams over shared memory: one closed loop's state for every worker."""

    POSITION, TAKEN, RESERVED, MEASURED_LEFT, WINDOW_OVER = range(5)

    def __init__(self, plan: Plan, ctx: Any) -> None:
        self.plan = plan
        self.lock = ctx.Lock()
        self.values = ctx.RawArray("q", 5)
        self.values[self.MEASURED_LEFT] = plan.measured
        self.values[self.WINDOW_OVER] = int(plan.measured == 0)

    def __getstate__(self) -> dict[str, Any]:  # a worker gets the lock and the memory, not a copy of the plan
        return {"lock": self.lock, "values": self.values}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.plan = None  # set by the worker (`Share.closed_loop`)

    def take(self, mine: bool) -> tuple[int, bool] | None:
        v, n = self.values, len(self.plan.requests)
        with self.lock:
            if mine:
                v[self.RESERVED] -= 1
            elif v[self.TAKEN] + v[self.RESERVED] >= n:
                return None
            index = v[self.POSITION]
            v[self.POSITION] += 1
            if self.plan.requests[index].phase == "cooldown" and v[self.WINDOW_OVER]:
                return None
            v[self.TAKEN] += 1
            mine = v[self.TAKEN] + v[self.RESERVED] < n
            v[self.RESERVED] += mine
            return index, mine

    def measured_done(self) -> None:
        with self.lock:
            self.values[self.MEASURED_LEFT] -= 1
            if self.values[self.MEASURED_LEFT] == 0:
                self.values[self.WINDOW_OVER] = 1

    async def wait_window_over(self) -> None:
        while not self.values[self.WINDOW_OVER]:
            await asyncio.sleep(WINDOW_POLL_S)


# --------------------------------------------------------------------------- one worker


@dataclass
class Share:
    """What one worker runs (loops._execute's `share`): its streams or arrivals, the loop's id, the shared start."""

    worker: int
    loop_id: str
    connections: int
    streams: int | None = None  # closed loop: this worker's streams
    state: SharedStreams | None = None
    requests: list[PlannedRequest] | None = None  # open loop: this worker's arrivals
    conn: Any = None
    plan: Plan | None = None

    def closed_loop(self) -> dict[str, Any]:
        assert self.state is not None
        self.state.plan = self.plan
        return {"state": self.state, "streams": self.streams}

    async def start(self) -> float:
        """Say this worker is ready, take the shared start instant (perf_counter) and wait for it."""
        self.conn.send(("ready", self.worker))
        loop = asyncio.get_running_loop()
        message = await loop.run_in_executor(None, self.conn.recv)
        t_origin = float(message[1])
        delay = t_origin - time.perf_counter()
        if delay > 0.002:
            await asyncio.sleep(delay - 0.002)
        while time.perf_counter() < t_origin:
            await asyncio.sleep(0)
        return t_origin


STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


def _die_with_parent(parent: int) -> None:
    """SIGKILL this worker when the process that started it dies (Linux), and never survive it meanwhile.

    The stop signals arrive blocked (the parent blocks them while it starts a worker, `_tracked_start`) and
    are unblocked here: a SIGTERM or SIGHUP sent meanwhile (to the process group, or by the parent stopping
    its workers) ends the worker now, silently (the default action: no Python exception, no traceback)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the parent's to handle: it stops the workers
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # it died before the request above
        os._exit(1)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def _tracked_start(process: Any, procs: list[Any]) -> None:
    """Start a worker and add it to `procs` with the stop signals held off in between: a signal's exception
    raised between the two would leave a worker the parent never stops, which outlives it and prints a
    traceback once the parent's shared lock is gone (issue 31). The signal is taken right after."""
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        process.start()
        procs.append(process)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def _worker_main(conn: Any, parent: int, share: Share, plan: Plan, base_url: str, workload: Workload,
                 endpoint: Endpoint, model: str | None, time_scale: float, headers: dict[str, str] | None,
                 execute: Callable[..., Any]) -> None:
    """A worker process: run its share of the plan with `execute` (the one-process client's coroutine,
    framework.execution.client.loops, passed in so this module does not import it back), each row to the
    parent as its request ends."""
    _die_with_parent(parent)
    share.conn, share.plan = conn, plan
    try:
        raw = asyncio.run(execute(plan, base_url, workload, endpoint, model, time_scale, headers,
                                   lambda index, unanalysed, row: conn.send(("row", index, unanalysed, row)),
                                   share=share))
        conn.send(("done", share.worker, raw))
    except BaseException:  # noqa: BLE001 - the parent says what failed
        try:
            conn.send(("error", share.worker, traceback.format_exc(limit=8)))
        except OSError:  # the parent is gone (it stopped): nobody to tell, and nothing to print
            os._exit(1)
    finally:
        conn.close()


# --------------------------------------------------------------------------- the parent


class WorkerError(RuntimeError):
    """A client worker failed or died: the launch's measurement is incomplete."""


def run_workers(plan: Plan, n: int, base_url: str, workload: Workload, endpoint: Endpoint, model: str | None,
                time_scale: float, headers: dict[str, str] | None,
                on_row: Callable[[int, bool, dict[str, Any]], None], execute: Callable[..., Any]) -> dict[str, Any]:
    """Execute `plan` on `n` worker processes; `on_row` is called here, in this process, for every row.

    Returns the merged `client_health` (with `workers`). Raises WorkerError if a worker fails; a signal's
    exception (SystemExit, KeyboardInterrupt) passes on after every worker is stopped.
    """
    if (why := unspawnable(n)) is not None:  # a caller that did not go through parse_workers
        raise WorkerError(why)
    ctx = multiprocessing.get_context("spawn")  # no fork: the parent may hold threads (progress, watchdogs)
    loop_id = uuid.uuid4().hex[:16]
    shares: list[Share] = []
    if plan.mode == "closed":
        state = SharedStreams(plan, ctx)
        streams = min(plan.concurrency or 1, len(plan.requests))
        for k, s in enumerate(split_streams(streams, n)):
            shares.append(Share(worker=k, loop_id=loop_id, connections=max(1, s), streams=s, state=state))
    else:
        from framework.execution.client import connection, openloop  # the parent's (a worker never sizes)

        for k, part in enumerate(split_arrivals(plan.requests, n)):
            pool = openloop.pool_size(plan, time_scale, connection.IDLE_DEFAULT_S, requests=part)
            shares.append(Share(worker=k, loop_id=loop_id, connections=pool, requests=part))
    procs, conns = [], []
    measured: list[dict[str, Any]] = []
    raws: dict[int, dict[str, Any]] = {}
    t_origin = 0.0
    try:
        for share in shares:
            mine, theirs = ctx.Pipe(duplex=True)
            p = ctx.Process(target=_worker_main, name=f"client-worker-{share.worker}", daemon=True,
                            args=(theirs, os.getpid(), share, plan, base_url, workload, endpoint, model, time_scale,
                                  headers, execute))
            _tracked_start(p, procs)
            theirs.close()
            conns.append(mine)
        live = dict(enumerate(conns))
        ready: set[int] = set()
        started = False
        deadline = time.monotonic() + READY_TIMEOUT_S
        while live:
            timeout = max(0.0, deadline - time.monotonic()) if not started else 1.0
            got = multiprocessing.connection.wait(list(live.values()), timeout=timeout)
            if not got and not started:
                raise WorkerError(f"{n - len(ready)} of {n} client workers not ready after {READY_TIMEOUT_S:g} s")
            for c in got:
                k = next(i for i, x in live.items() if x is c)
                try:
                    message = c.recv()
                except EOFError:
                    procs[k].join(1.0)
                    raise WorkerError(_died(k, procs[k].exitcode, started=k in ready)) from None
                tag = message[0]
                if tag == "row":
                    _, index, unanalysed, row = message
                    if row.get("phase") == "measured":
                        measured.append(row)
                    on_row(index, unanalysed, row)
                elif tag == "ready":
                    ready.add(k)
                    if len(ready) == n and not started:
                        t_origin = time.perf_counter() + START_LEAD_S
                        for x in conns:
                            x.send(("start", t_origin))
                        started = True
                elif tag == "done":
                    raws[k] = message[2]
                    del live[k]
                else:
                    raise WorkerError(f"client worker {k} failed:\n{message[2]}")
    finally:
        stop_workers(procs)
        for c in conns:
            c.close()
    return merge_health([raws[k] for k in sorted(raws)], measured, t_origin)


def merge_health(raws: list[dict[str, Any]], measured: list[dict[str, Any]], t_origin: float) -> dict[str, Any]:
    """One launch's client health over its workers (pure): send lateness, loop lag, gaps and spans over every
    worker's samples and rows; the self-check's CPU, reads and bias from the worker that fared worst (a worker
    that fell behind biases the figures of its own streams, whatever the others did); the reasons of each.

    `raws`: each worker's own `client_health` (``health``) and raw samples (``lateness``, ``loop_lag``)."""
    healths = [r["health"] for r in raws]
    merged = client_health([x for r in raws for x in r["lateness"]], [x for r in raws for x in r["loop_lag"]],
                           measured)
    reasons = list(merged["reasons"])  # lateness and loop lag, over every worker's samples
    for k, h in enumerate(healths):
        reasons += [f"worker {k}: {why}" for why in h.get("reasons") or []
                    if not why.startswith(("median send lateness", "median event-loop lag"))]
    bias = {m: max((v for v in ((h.get("bias") or {}).get(m) for h in healths) if v is not None), default=None)
            for m in BIAS_METRICS}
    busiest = max(healths, key=lambda h: (h.get("cpu") or {}).get("busy") or 0.0)
    most_reads = max(healths, key=lambda h: (h.get("events_per_read") or {}).get("mean") or 0.0)
    cpu = None if busiest.get("cpu") is None else {**busiest["cpu"], "per_worker": [h.get("cpu") for h in healths]}
    return {**merged, "cpu": cpu, "events_per_read": most_reads.get("events_per_read"), "bias": bias,
            "saturated": any(h.get("saturated") for h in healths), "bottleneck": bool(reasons), "reasons": reasons,
            "clock_origin_s": t_origin, "workers": len(raws),
            "criterion": min((h.get("criterion") or CRITERION - 1 for h in healths), default=CRITERION - 1),
            "connection_retries": sum(int(h.get("connection_retries") or 0) for h in healths)}


def _died(k: int, code: int | None, started: bool) -> str:
    """What a worker that went away without a word did, and what to do (its own traceback, if any, is on stderr)."""
    how = f"was killed by signal {-code}" if code is not None and code < 0 else f"exited with code {code}"
    if started:
        return (f"client worker {k} {how} while it measured (killed for memory, or by a signal?); "
                f"its error, if it printed one, is on stderr above")
    return (f"client worker {k} {how} before it was ready: it could not start; its error is on stderr above "
            f"(a worker re-imports the script that started the run: start it under "
            f"`if __name__ == \"__main__\":`, or use client.workers=1)")


def stop_workers(procs: list[Any], grace_s: float = STOP_GRACE_S) -> None:
    """Stop every worker still alive: SIGTERM, then SIGKILL after `grace_s`; reap them all."""
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + grace_s
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join()
