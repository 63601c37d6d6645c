"""The open loop's sends (framework.execution.client.openloop): its pool, its order, its lateness as recorded."""

from __future__ import annotations

import asyncio
import time

from framework.core.workload import Plan, PlannedRequest
from framework.execution.client import openloop


def _plan(times: list[float], cap: int | None = None) -> Plan:
    reqs = [PlannedRequest(index=i, phase="measured", prompt=[1], prompt_tokens=1, output_tokens=1, send_at_s=t)
            for i, t in enumerate(times)]
    return Plan(mode="open", concurrency=cap, requests=reqs)


def test_the_pool_holds_the_requests_sent_within_its_idle_limit_between_the_floor_and_the_cap():
    # 240 req/s for 4 s: 480 within the first 2 s, capped at 256
    assert openloop.pool_size(_plan([i / 240 for i in range(960)]), 1.0, 2.0) == openloop.POOL_CAP
    # 50 req/s: 101 requests at or before 2.0 s
    assert openloop.pool_size(_plan([i / 50 for i in range(400)]), 1.0, 2.0) == 101
    # the speed-up compresses the schedule: 2 req/s of model time at speed-up 10 is 20 req/s of wall time
    assert openloop.pool_size(_plan([i / 2 for i in range(400)]), 10.0, 2.0) == 41
    # a slow loop keeps the floor the pool had before; a short plan one connection per request
    assert openloop.pool_size(_plan([i / 2 for i in range(100)]), 1.0, 2.0) == openloop.POOL_FLOOR
    assert openloop.pool_size(_plan([0.0, 0.5, 1.0]), 1.0, 2.0) == 3
    # a worker's share counts its own requests
    plan = _plan([i / 100 for i in range(400)])
    assert openloop.pool_size(plan, 1.0, 2.0, requests=plan.requests[::2]) == 101


def test_the_lateness_is_the_written_headers_against_the_wall_target_else_the_rows_start():
    assert openloop.wall_lateness({"sent": 10.25}, 10.0, 5.0, 4.0, 4.0) == 0.25
    # no stamp (a retry's own session): the row's start against its schedule, model seconds over the speed-up
    assert openloop.wall_lateness({}, 10.0, 5.0, 4.0, 4.0) == 0.25


def _sends(plan: Plan) -> tuple[list[tuple[int, float, float]], list[float]]:
    sent: list[tuple[int, float, float]] = []

    async def one(session, req, scheduled_s=None, target=None):
        sent.append((req.index, scheduled_s, time.perf_counter() - target))
        await asyncio.sleep(0.005)
        return 0.5 + req.index  # what the request's own stamp said

    async def main() -> list[float]:
        lateness: list[float] = []
        await openloop.open_loop(plan, None, one, 1.0, time.perf_counter(), lateness)
        return lateness

    return sent, asyncio.run(main())


def test_every_request_is_sent_once_at_or_after_its_time_and_its_lateness_recorded():
    for cap in (None, 2):
        plan = _plan([0.0, 0.01, 0.01, 0.02, 0.06, 0.061], cap)
        sent, lateness = _sends(plan)
        assert sorted(i for i, _, _ in sent) == list(range(6)), cap  # each once (ties in any order)
        assert all(late >= 0 for _, _, late in sent), sent  # never before its time
        if cap is None:  # uncapped: each send's schedule is the plan's
            assert all(s == plan.requests[i].send_at_s for i, s, _ in sent), sent
        else:  # capped: in send order, each slot at its time or when one came free
            assert [i for i, _, _ in sent] == list(range(6))
        assert sorted(lateness) == [0.5 + i for i in range(6)]  # what `one` returned, not the task's start
