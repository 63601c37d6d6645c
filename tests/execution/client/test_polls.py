"""The loop's polls, timed (client.polls): how long a read's bytes waited for the loop."""

from __future__ import annotations

import asyncio
import time

import pytest

from framework.execution.client import polls


def test_a_read_behind_a_blocked_poll_waited_only_its_place_in_the_turn():
    c = polls.PollClock()
    assert c.waited(1.0) is None  # no poll yet
    c.prev_end, c.start, c.end = 0.5, 0.9, 1.0  # the poll blocked 100 ms: the bytes woke it
    assert c.waited(1.0005) == pytest.approx(0.0005)


def test_a_read_behind_a_busy_turn_waited_half_the_turn_and_its_place():
    c = polls.PollClock()
    c.prev_end, c.start, c.end = 0.990, 0.99995, 1.0  # a 10 ms turn, then a poll that returned at once
    assert c.waited(1.002) == pytest.approx(0.005 + 0.002)


def test_install_times_the_running_loops_polls_once():
    async def main() -> tuple[polls.PollClock | None, polls.PollClock | None, float, float]:
        loop = asyncio.get_running_loop()
        clock = polls.install(loop)
        t0 = time.perf_counter()
        await asyncio.sleep(0.005)  # one poll blocks about 5 ms; the task resumes a turn or two after it
        return clock, polls.install(loop), t0, clock.end if clock else 0.0

    clock, again, t0, end = asyncio.run(main())
    assert clock is not None and again is clock
    assert end - t0 >= 0.004  # a timed poll returned after the sleep (untimed, it stays 0)
