"""The open loop's sends: every request at its scheduled time, late by the event loop's lag, never by a backlog.

One scheduler coroutine that sleeps until each send time and then hands the request to a new task costs
every send two of the event loop's turns after its time came due: the turn that wakes the scheduler and
the turn that first runs the task. On a client core that reads every stream of a 240 req/s loop, a turn
lasts milliseconds, and the sends fell 29-49 ms behind (docs/results/client_capacity.md). Here each
request gets a sender task of its own `LEAD_S` before its time; the task sleeps on its own timer, so it
runs in the very turn in which that timer comes due and goes straight to the request. Its lateness is
then what the loop's lag makes it, plus the last `SPIN_BEFORE_SEND_S`, not what the sends before it left.
Sends that fall due in one turn go out in the order the loop runs their tasks, which is not always the
plan's: making each wait for the one before (tried) cost a turn per send in a backlog, and a starved client's
sends then fell seconds behind. Each request's row keeps its own schedule and lateness either way.

The open loop's pool is filled before the clock starts with as many connections as the schedule sends
requests within the pool's idle limit (`pool_size`): a request beyond the 16 the pool used to hold paid a
TCP connect (several loop turns) inside its measured send, and connections opened for later sends would
be dropped idle before use.

A capped loop (`max_concurrency`) keeps its one scheduler: its slots are taken in send order, at each
send time (a slot taken `LEAD_S` early would shrink the cap).

The lateness recorded (`send_lateness_wall_s`, the self-check's samples) is taken when the request's
headers were written to its connection (`send_stamps`: after the task's turn, the pool's connection and
aiohttp's own set-up), not when its task was made: a client that falls behind says by how much.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable

from framework.core.workload import Plan, PlannedRequest

LEAD_S = 0.05  # a sender task is made this long (wall) before its send time
SPIN_BEFORE_SEND_S = 0.0012  # the event loop's timers round up to 1 ms: the last stretch before a send yields
POOL_CAP = 256  # connections opened before the clock at most (as the closed loop's)
POOL_FLOOR = 16  # and at least this many, as before (or one per request, if fewer)


def pool_size(plan: Plan, time_scale: float, idle_s: float, requests: list[PlannedRequest] | None = None) -> int:
    """Connections to open before an open loop's clock starts (pure): its requests sent within `idle_s`
    wall seconds of the start (a pooled connection unused longer is dropped), within
    [min(n, POOL_FLOOR), POOL_CAP]."""
    reqs = plan.requests if requests is None else requests
    if not reqs:
        return 1
    early = sum(1 for r in reqs if (r.send_at_s or 0.0) / time_scale <= idle_s)
    return max(1, min(len(reqs), POOL_CAP, max(POOL_FLOOR, early)))


async def _until(target: float) -> None:
    """Return at `target` (perf_counter): a timer up to the last stretch, then yielding turns to the instant."""
    delay = target - time.perf_counter()
    if delay > SPIN_BEFORE_SEND_S:
        await asyncio.sleep(delay - SPIN_BEFORE_SEND_S)
    while time.perf_counter() < target:
        await asyncio.sleep(0)


async def open_loop(plan: Plan, session: Any, one: Callable, time_scale: float, t_origin: float,
                    lateness: list[float], requests: list[PlannedRequest] | None = None) -> None:
    """Send each request (of `requests`, a worker's share; default the plan's) at its scheduled time (model
    seconds / time_scale after `t_origin`). `one(session, req, scheduled_s=, late=)` sends it and returns
    its row's wall lateness, which is appended to `lateness`."""
    todo = plan.requests if requests is None else requests
    if plan.concurrency:
        await _capped(plan.concurrency, session, one, time_scale, t_origin, lateness, todo)
        return
    tasks: list[asyncio.Future] = []

    async def send(req: PlannedRequest, target: float) -> None:
        await _until(target)
        lateness.append(max(0.0, await one(session, req, scheduled_s=_scheduled(target, t_origin, time_scale),
                                           target=target)))

    for req in todo:
        target = t_origin + (req.send_at_s or 0.0) / time_scale
        lead = target - LEAD_S - time.perf_counter()
        if lead > 0:
            await asyncio.sleep(lead)
        tasks.append(asyncio.ensure_future(send(req, target)))
    await asyncio.gather(*tasks, return_exceptions=True)


async def _capped(cap: int, session: Any, one: Callable, time_scale: float, t_origin: float,
                  lateness: list[float], todo: list[PlannedRequest]) -> None:
    """A capped open loop: one scheduler takes a slot at each send time, in send order, and then sends."""
    limit = asyncio.Semaphore(cap)
    tasks: list[asyncio.Future] = []

    async def send(req: PlannedRequest, target: float) -> None:
        try:
            late = await one(session, req, scheduled_s=_scheduled(target, t_origin, time_scale), target=target)
            lateness.append(max(0.0, late))
        finally:
            limit.release()

    for req in todo:
        target = t_origin + (req.send_at_s or 0.0) / time_scale
        await _until(target)
        await limit.acquire()
        target = max(target, time.perf_counter())  # waiting for a free slot is the design's, not lateness
        tasks.append(asyncio.ensure_future(send(req, target)))
    await asyncio.gather(*tasks, return_exceptions=True)


def _scheduled(target: float, t_origin: float, time_scale: float) -> float:
    return round((target - t_origin) * time_scale, 7)


def send_stamps() -> Any:
    """A trace for the open loop's session: stamps (perf_counter) when a request's line and headers were
    written to its connection, in the dict the request passed as ``trace_request_ctx`` (``sent``)."""
    import aiohttp

    async def headers_sent(session: Any, ctx: Any, params: Any) -> None:
        stamp = ctx.trace_request_ctx
        if isinstance(stamp, dict):
            stamp["sent"] = time.perf_counter()

    trace = aiohttp.TraceConfig()
    trace.on_request_headers_sent.append(headers_sent)
    return trace


def wall_lateness(stamp: dict[str, float], target: float, start_s: float | None, scheduled_s: float,
                  time_scale: float) -> float:
    """A send's lateness in wall seconds (pure): when its headers were written (`stamp`, `send_stamps`)
    against its wall send time `target`; without a stamp (a retry's own session has no trace), its row's
    start against its schedule (both model seconds on the launch's clock)."""
    if "sent" in stamp:
        return round(stamp["sent"] - target, 7)
    if start_s is None:
        return 0.0
    return round((start_s - scheduled_s) / time_scale, 7)
