"""The sim never guesses (issue 32): a promise the model clock gives up on while requests are in flight, or a
request that comes after its loop's promise was given up, fails the launch (``sim_clock_gave_up``); a
give-up at a loop's end, with nothing in flight, does not. The real engine thread, a short wall grace."""

from __future__ import annotations

import asyncio
import time

import pytest

from framework.execution.failures import classify
from framework.servers.api.request import LoopTag, SimRequest
from framework.servers.sim import model
from framework.servers.sim.engine import Engine
from framework.servers.sim.profile import load_profile

GRACE_S = 0.2


def _engine(calls: list[str]) -> Engine:
    args = model.resolve_args(["--tp-size", "8", "--sim-noise-scale", "0", "--sim-speedup", "2000"])
    engine = Engine(load_profile("h200_tp8"), args, seed=3, on_clock_gave_up=calls.append)
    engine.hold_timeout_s = GRACE_S
    engine.start()
    return engine


def _request(i: int, tag: LoopTag, loop: asyncio.AbstractEventLoop, nxt: bool = False) -> SimRequest:
    return SimRequest(rid=str(i), prompt_tokens=64, max_new_tokens=4, stop=[], seed=i, queue=asyncio.Queue(),
                      loop=loop, closed_loop_next=nxt, loop_tag=tag)


async def _finish(req: SimRequest) -> None:
    while not (await asyncio.wait_for(req.queue.get(), 30)).finished:
        pass


async def _until(cond, limit_s: float = 30.0) -> None:
    t0 = time.monotonic()
    while not cond():
        assert time.monotonic() - t0 < limit_s, "the engine never gave up"
        await asyncio.sleep(0.01)


def test_a_promise_given_up_while_requests_wait_fails_the_launch():
    calls: list[str] = []
    engine = _engine(calls)

    async def drive() -> None:
        loop = asyncio.get_running_loop()
        # a closed loop of 3 streams: the first request promises two more at its instant; one comes, one never
        engine.submit(_request(0, LoopTag("L", 0, 3), loop))
        engine.submit(_request(1, LoopTag("L", 1, 3), loop))
        await _until(lambda: bool(calls))

    try:
        asyncio.run(drive())
    finally:
        engine.stop()
    assert engine.clock_gave_up == calls[0]
    assert "did not arrive" in calls[0] and "2 requests were in flight" in calls[0]


def test_a_give_up_at_a_loops_end_is_quiet_but_a_late_request_of_that_loop_fails_the_launch():
    calls: list[str] = []
    engine = _engine(calls)

    async def drive() -> None:
        loop = asyncio.get_running_loop()
        # one stream whose request announces a successor (a cool-down the client then cancels): nothing in flight
        first = _request(0, LoopTag("L", 0, 1), loop, nxt=True)
        engine.submit(first)
        await _finish(first)
        await _until(lambda: engine.holds_timed_out > 0)
        await asyncio.sleep(GRACE_S)
        assert calls == [] and engine.clock_gave_up is None
        # a new loop on the idle engine is unaffected
        fresh = _request(1, LoopTag("M", 0, 1), loop)
        engine.submit(fresh)
        await _finish(fresh)
        assert calls == []
        # the successor comes after all: it would arrive by the wall clock, so the launch fails
        engine.submit(_request(2, LoopTag("L", 1, 1), loop))
        assert calls and "arrived after that loop's promise was given up" in calls[0]

    try:
        asyncio.run(drive())
    finally:
        engine.stop()


@pytest.mark.parametrize("code", [3, -9])
def test_the_servers_exit_after_a_give_up_is_its_own_launch_failure_class(code):
    log = ["The server is fired up and ready to roll!",
           "[2026-12-01 10:00:00] sim_clock_gave_up: a promised request did not arrive within 10 s of wall time "
           "while 63 requests were in flight (model time 12.5 s)"]
    failure = classify(code, log, after_ready=True, summary="server exited with code 3 while being measured")
    assert failure.cls == "sim_clock_gave_up" and failure.line.endswith("(model time 12.5 s)")
    assert classify(code, log[:1] + ["Segmentation fault"], after_ready=True).cls == "crash_after_ready"


@pytest.mark.faults  # the sim's wall grace is 10 s: out of the default run, as the other end-to-end faults
def test_the_sim_process_exits_with_its_class_when_a_promise_never_comes(sim_factory):
    import threading

    import requests

    sim = sim_factory("--sim-startup-s", "0")
    body = {"input_ids": list(range(64)), "sampling_params": {"max_new_tokens": 4, "ignore_eos": True}}

    def send(seq: int) -> None:  # a closed loop of 3 streams of which 2 come: the third promise never does
        try:
            requests.post(sim.url + "/generate", json=body, headers={"X-Sim-Loop": f"id=z;seq={seq};streams=3"},
                          timeout=60)
        except requests.RequestException:
            pass  # the server exits under it

    threads = [threading.Thread(target=send, args=(i,), daemon=True) for i in range(2)]
    for t in threads:
        t.start()
    assert sim.proc.wait(60) == 3
    lines = sim.output().splitlines()
    failure = classify(3, lines, after_ready=True)
    assert failure.cls == "sim_clock_gave_up" and "2 requests were in flight" in failure.line
