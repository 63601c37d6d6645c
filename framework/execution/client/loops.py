"""Executing a plan: the closed and the open loop on one asyncio event loop, and the client's own timing.

One event loop drives every stream (aiohttp, one shared connection pool without a cap): threads
with a blocking client could not keep 256 streams timed on 2 cores (benchmarks/client_fidelity.py
measures both against the simulator's ground truth; docs/results/client_fidelity.md). The pool is
filled before the clock starts (`_open_connections`), so no measured send pays for a TCP connect.
Each request's RequestRow (framework.core.trials) is completed with the plan's side (phase, planned lengths, schedule)
and handed to `on_row` as its row (`RequestRow.measured`) the moment the request ends.

The client times itself too: an open loop's lateness (scheduled against actual send, wall
seconds), the event loop's lag (how long a ready callback waits to run), its loop thread's CPU time
and the events per socket read, so a run can say when the client, not the server, was the
bottleneck and by how much its figures may be off (`selfcheck.client_health`). `clock_origin_s` is
the workload's start on `time.perf_counter()` (CLOCK_MONOTONIC on Linux): a request's send is that
plus its `start_s / time_scale`, comparable with a server's monotonic log on the same machine.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path
from typing import Any, Callable

from framework.core.trials import RequestRow
from framework.core.workload import (
    Endpoint,
    Plan,
    PlannedRequest,
    Workload,
    endpoint_of,
)
from framework.execution.client import connection, openloop, polls
from framework.execution.client.capture import OutputCapture
from framework.execution.client.plan import resolve_plan
from framework.execution.client.request import measure_request, request_body
from framework.execution.client.selfcheck import client_health
from framework.execution.client.server import served_model

LOOP_LAG_PERIOD_S = 0.01
# The sim's extension (other servers ignore it): "next" = this closed-loop stream sends another request
# the moment this one ends, so the simulated clock waits for it instead of counting the client's wall time.
CLOSED_LOOP_HEADER = "X-Sim-Closed-Loop"
# The sim's extension too: the request's place in this run's loop (its plan index; a closed loop's streams, an
# open loop's scheduled arrival and the next one's), so the sim admits it on its model clock at that place
# whatever the wall clock did (servers/sim/arrivals.py).
LOOP_HEADER = "X-Sim-Loop"
# After the measured window, in-flight cool-downs get this long (wall) before they are cancelled: one that ended
# at the same instant as the last measured request (its last chunk sent with that one's) then always ends ok and
# counts in the window's request throughput, instead of only when its read happened to come before the cancel.
# Ending later than the window, those it lets finish are outside it anyway; no new request is sent meanwhile.
COOLDOWN_GRACE_S = 0.05


# --------------------------------------------------------------------------- the client's own timing


def _settle(done: asyncio.Future, t: float) -> None:
    if not done.done():
        done.set_result(time.perf_counter() - t)


class _LoopLag:
    """How long a callback made ready waits before the loop runs it (`samples`), and how late its 10 ms timer
    fired (`stalls`), sampled every 10 ms. A burst of work (many streams ending at once) keeps the loop from
    its timers for the whole burst while a ready callback, queued after it, waits only for what is left:
    the self-check caps a read's possible wait by the larger of the two (selfcheck.client_health)."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self.stalls: list[float] = []
        self._task: asyncio.Task | None = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            asleep = time.perf_counter()
            await asyncio.sleep(LOOP_LAG_PERIOD_S)
            woke = time.perf_counter()
            self.stalls.append(max(0.0, woke - asleep - LOOP_LAG_PERIOD_S))
            done = loop.create_future()
            loop.call_soon(_settle, done, woke)
            self.samples.append(await done)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and current.cancelling():  # our own cancellation (an interrupt): pass it on
                    raise


# --------------------------------------------------------------------------- executing a plan


async def _execute(plan: Plan, base_url: str, workload: Workload, endpoint: Endpoint, model: str | None,
                   time_scale: float, headers: dict[str, str] | None,
                   on_row: Callable[[int, bool, dict[str, Any]], None], share: Any = None) -> dict[str, Any]:
    """`share` (framework.execution.client.workers.Share): this process is one of several workers; it runs its
    part of the plan from the shared start and returns its raw timing for the parent's `client_health`."""
    import aiohttp

    polls.install(asyncio.get_running_loop())  # each read's wait for the loop (the self-check, criterion 4)
    lag = _LoopLag()
    lag.start()
    lateness: list[float] = []
    rows: list[dict[str, Any]] = []
    reads: list[list[int]] = []  # per measured request: events per token-carrying read (the self-check)
    waits: list[list[float | None]] = []  # per measured request: each read's bytes' wait for the loop (polls)
    connector = connection.connector()  # idle connections dropped before a server's keep-alive closes them
    retried = [0]  # requests sent again on a fresh connection (framework.execution.client.connection)
    t_origin = time.perf_counter()
    origin: dict[str, float] = {}  # the sim's model clock at this launch's start (set by the first row)

    encoded = {req.index: json.dumps(request_body(endpoint, req.prompt, req.output_tokens, workload, model),
                                     separators=(",", ":")).encode() for req in plan.requests}

    loop_id = share.loop_id if share is not None else uuid.uuid4().hex[:16]  # one loop, whichever process sends

    async def one(session: aiohttp.ClientSession, req: PlannedRequest, more: bool = False,
                  scheduled_s: float | None = None, target: float | None = None) -> float:
        """Send `req` and hand on its row; an open loop's (`scheduled_s`, `target` its wall send time) returns
        its send's wall lateness, taken where the request went to the HTTP client (openloop.wall_lateness)."""
        hdrs = {**(headers or {}), LOOP_HEADER: f"id={loop_id};{_loop_tag(plan, req)}"}
        if more:
            hdrs[CLOSED_LOOP_HEADER] = "next"
        stamp: dict[str, float] | None = None if scheduled_s is None else {}
        measured = await measure_request(session, base_url, encoded.pop(req.index), workload.request_timeout_s,
                                         time_scale, hdrs, endpoint, t_origin, sent=stamp,
                                         capture=OutputCapture(req.prompt, req.output_tokens)
                                         if workload.keep_outputs else None)
        retried[0] += measured.retries or 0
        send_lateness_wall_s = None
        if stamp is not None and scheduled_s is not None:
            send_lateness_wall_s = openloop.wall_lateness(stamp, target or 0.0, measured.start_s, scheduled_s,
                                                          time_scale)
        result = measured.completed(
            prompt_tokens=measured.prompt_tokens or req.prompt_tokens,
            scheduled_s=scheduled_s, send_lateness_wall_s=send_lateness_wall_s, phase=req.phase,
            planned_prompt_tokens=req.prompt_tokens, planned_output_tokens=req.output_tokens,
            model_start_s=_model_start(measured, origin), dataset_row=req.dataset_row,
        )
        row = result.measured()
        if req.phase == "measured":
            rows.append(row)
            reads.append(measured.read_events or [])
            waits.append(measured.read_waits or [])
        on_row(req.index, req.phase != "measured", row)
        return send_lateness_wall_s or 0.0

    traces = [openloop.send_stamps()] if plan.mode == "open" else []  # when each send really went out
    async with aiohttp.ClientSession(connector=connector, trace_configs=traces) as session:
        if share is not None:
            pool = share.connections
        elif plan.mode == "open":  # the requests sent within the pool's idle limit (openloop.pool_size)
            pool = openloop.pool_size(plan, time_scale, connection.IDLE_DEFAULT_S)
        else:
            pool = min(len(plan.requests), plan.concurrency or 16, 256)
        await _open_connections(session, base_url, headers, pool)
        t_origin = time.perf_counter() if share is None else await share.start()
        cpu0 = (time.thread_time(), time.process_time(), _run_queue_s())
        if plan.mode == "closed":
            await _closed_loop(plan, session, one, **({} if share is None else share.closed_loop()))
        else:
            await openloop.open_loop(plan, session, one, time_scale, t_origin, lateness,
                             requests=None if share is None else share.requests)
        cpu = {"thread_s": time.thread_time() - cpu0[0], "process_s": time.process_time() - cpu0[1],
               "wall_s": time.perf_counter() - t_origin}
        waited = _run_queue_s()
        if waited is not None and cpu0[2] is not None:
            cpu["run_queue_s"] = waited - cpu0[2]
    await lag.stop()
    health = {**client_health(lateness, lag.samples, rows, cpu=cpu, reads=reads, stalls=lag.stalls,
                                 waits=waits),
              "clock_origin_s": t_origin, "connection_retries": retried[0]}
    if share is not None:  # a worker: its own health, and the raw timing the parent merges over every worker
        return {"health": health, "lateness": lateness, "loop_lag": lag.samples}
    return health


def _run_queue_s() -> float | None:
    """Seconds this thread has waited, runnable, for a CPU (Linux schedstat; None elsewhere): a client that
    other processes keep off its core is as late as one that is busy, though its own CPU time stays low."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


def _loop_tag(plan: Plan, req: PlannedRequest) -> str:
    """The request's place in the loop (LOOP_HEADER, after its id): plan index; a closed loop's number of
    streams; an open loop's scheduled arrival, the next request's (``-``: none) and the cap in flight."""
    if plan.mode == "closed":
        return f"seq={req.index};streams={min(plan.concurrency or 1, len(plan.requests))}"
    after = plan.requests[req.index + 1] if req.index + 1 < len(plan.requests) else None  # index = position
    nxt = "-" if after is None or after.send_at_s is None else repr(after.send_at_s)
    cap = f";cap={plan.concurrency}" if plan.concurrency else ""
    return f"seq={req.index};at={req.send_at_s or 0.0!r};next={nxt}{cap}"


def _model_start(result: RequestRow, origin: dict[str, float]) -> float | None:
    """On the sim's model clock, the send time (``model_start_s``) is the request's arrival on its loop's
    model clock (the sim admits every request of this run's loop on it, from the loop's start), so windows
    and throughputs use one clock with the figures. None on the wall clock."""
    arrival = result.sim_arrival_model_s
    if result.clock != "sim_model" or arrival is None or result.start_s is None:
        return None
    return round(float(arrival), 7)


class Streams:
    """Which request a closed loop's stream sends next, and when the measured window is over (one process).

    `take` hands out the plan's requests in order: a stream that announced its next request (`mine`)
    takes one of those reserved; another takes one only while some request is not another stream's.
    framework.execution.client.workers.SharedStreams is the same over shared memory, for several workers.
    """

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.position = 0  # the next request of the plan (its index)
        self.taken = 0
        self.reserved = 0  # requests left in the plan that a stream has announced it takes next
        self.measured_left = plan.measured
        self.window_over = asyncio.Event()
        if self.measured_left == 0:
            self.window_over.set()

    def take(self, mine: bool) -> tuple[int, bool] | None:
        """(the request's index, whether its stream announces another), or None: this stream is done."""
        n = len(self.plan.requests)
        if mine:  # this stream announced its next request: it takes one of the reserved
            self.reserved -= 1
        elif self.taken + self.reserved >= n:  # every request left is another stream's
            return None
        index = self.position
        self.position += 1
        if self.plan.requests[index].phase == "cooldown" and self.window_over.is_set():
            return None
        self.taken += 1
        # another request follows this stream's the moment it ends while the plan has one no other stream
        # has announced (an announced successor that never came would hold the sim's clock)
        mine = self.taken + self.reserved < n
        self.reserved += mine
        return index, mine

    def measured_done(self) -> None:
        self.measured_left -= 1
        if self.measured_left == 0:
            self.window_over.set()

    async def wait_window_over(self) -> None:
        await self.window_over.wait()


async def _closed_loop(plan: Plan, session: Any, one: Callable, state: Any = None, streams: int | None = None) -> None:
    """`concurrency` streams; each sends its next request when the last ends, until every measured one has ended.

    `state` (default: this process's `Streams`) and `streams` (default: the plan's) are a worker's share."""
    state = Streams(plan) if state is None else state

    async def stream() -> None:
        mine = False
        while True:
            got = state.take(mine)
            if got is None:
                return
            index, mine = got
            req = plan.requests[index]
            await one(session, req, more=mine)
            task = asyncio.current_task()
            if task is not None and task.cancelling():  # cancelled (the request recorded it): no next request
                return
            if req.phase == "measured":
                state.measured_done()

    tasks = [asyncio.ensure_future(stream()) for _ in range(streams or plan.concurrency or 1)]
    waiter = asyncio.ensure_future(state.wait_window_over())
    await asyncio.wait([waiter, asyncio.gather(*tasks, return_exceptions=True)], return_when=asyncio.FIRST_COMPLETED)
    if waiter.done():  # cool-downs whose last chunk came with the last measured one's end as they did,
        await asyncio.wait(tasks, timeout=COOLDOWN_GRACE_S)  # not by whether their read came before the cancel
    for t in tasks:  # the measured window is over: cancel the cool-down requests still in flight
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    waiter.cancel()


async def _open_connections(session: Any, base_url: str, headers: dict[str, str] | None, n: int) -> None:
    """Fill the keep-alive pool before the clock starts, so no measured send pays for a TCP connect."""
    async def ping() -> None:
        try:
            async with session.get(base_url + "/health", headers=headers) as resp:
                await resp.read()
        except Exception:  # the pool is an optimisation; the workload reports real failures
            pass

    await asyncio.gather(*(ping() for _ in range(max(1, n))))


def run_workload(
    base_url: str,
    workload: Workload,
    *,
    requests_n: int,
    warmup: int,
    seed: int,
    time_scale: float = 1.0,
    api_key: str | None = None,
    on_row: Callable[[int, bool, dict[str, Any]], None],
    protocol: str = "sglang",
    endpoint: Endpoint | None = None,
    model: str | None = None,
    base_dir: Path | None = None,
    workers: int = 1,
) -> dict[str, Any]:
    """Execute the launch's workload plan against a running server; returns what the record keeps.

    `protocol` is the backend's (`sglang`: `/generate` unless the workload names an endpoint;
    `openai`: `/v1/completions`); `endpoint` overrides both. `model` is the OpenAI `model` field
    (default: the first id the server lists). `on_row(index, unanalysed, row)` is called the
    moment a request ends (warm-up and cool-down rows have `unanalysed` true and their `phase`);
    the caller writes it at once. Returns the resolved workload (seed, schedule hash, dataset
    sha256 and rows) and the client's own timing health. `workers` > 1 runs the plan on that many
    processes (framework.execution.client.workers; at most one per closed-loop stream); the health says
    how many ran (`workers`).
    """
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    ep: Endpoint = endpoint or endpoint_of(workload, protocol)
    if ep != "generate" and model is None:
        model = served_model(base_url, headers)
    plan = resolve_plan(workload, requests_n=requests_n, warmup=warmup, seed=seed, base_dir=base_dir)
    # an open loop's cap in flight is one semaphore in send order: one process (workers.worker_count)
    n = 1 if plan.mode == "open" and plan.concurrency else min(workers, plan.concurrency or len(plan.requests),
                                                                len(plan.requests))
    if n > 1:
        from framework.execution.client.workers import run_workers

        health = run_workers(plan, n, base_url, workload, ep, model, time_scale, headers, on_row, _execute)
    else:
        health = {**asyncio.run(_execute(plan, base_url, workload, ep, model, time_scale, headers, on_row)),
                  "workers": 1}
    return {**plan.resolved, "endpoint": ep, "model": model, "client": health}
