"""The promised arrivals of a client's loop (servers/sim/arrivals.py): pure bookkeeping, no clock."""

from __future__ import annotations

import pytest

from framework.servers.api.request import LoopTag, parse_loop_tag
from framework.servers.sim.arrivals import Arrivals


def test_the_loop_tag_round_trips_and_a_malformed_one_is_none():
    assert parse_loop_tag("id=ab;seq=3;streams=16") == LoopTag("ab", 3, 16)
    assert parse_loop_tag("id=ab;seq=0;at=0.25;next=-;cap=4") == LoopTag("ab", 0, None, 0.25, None, 4)
    assert parse_loop_tag("seq=3") is None and parse_loop_tag("id=a;seq=x") is None and parse_loop_tag("") is None


def test_a_closed_loop_holds_for_its_first_burst_and_each_successor():
    a = Arrivals()
    tag = LoopTag("L", streams=3)
    assert a.arrive(tag, 5.0, idle=True, fallback=9.0) == (5.0, 0.0, 0)  # starts now, not at the wall's 9.0
    assert a.due(5.0) and a.earliest() == 5.0  # two more of the burst are owed at 5.0
    assert a.arrive(tag, 5.0, False, 9.0)[0] == 5.0 and a.arrive(tag, 5.0, False, 9.0)[0] == 5.0
    assert not a.due(5.0) and a.earliest() is None
    a.ended(tag, 7.5, announced=True)
    a.ended(tag, 7.5, announced=False)  # the loop's last request: no successor
    assert a.due(7.5) and not a.due(7.4)
    assert a.arrive(tag, 7.5, False, 30.0) == (7.5, 2.5, 0)  # its successor arrives when it ended
    assert a.arrive(tag, 8.0, False, 30.0)[0] == 30.0  # nothing promised: the wall clock's time


def test_an_open_loop_arrives_at_its_schedule_and_waits_for_a_slot_at_its_cap():
    a = Arrivals()
    first = LoopTag("O", 0, at=0.0, next_at=0.1, cap=2)
    assert a.arrive(first, 3.0, True, 3.0)[:2] == (3.0, 0.0)
    assert a.earliest() == pytest.approx(3.1)
    second = LoopTag("O", 1, at=0.1, next_at=0.2, cap=2)
    assert a.arrive(second, 3.05, False, 99.0)[:2] == pytest.approx((3.1, 0.1))  # its schedule, not when it came
    assert a.earliest() is None  # two in flight: the third waits for a slot
    a.ended(first, 4.0, announced=False)
    assert a.earliest() == 4.0 and a.due(4.0)
    assert a.arrive(LoopTag("O", 2, at=0.2, next_at=0.3, cap=2), 4.0, False, 99.0)[0] == 4.0
    a.ended(second, 4.5, False)
    assert a.earliest() == 4.5  # the slot freed at 4.5, after the fourth's schedule (3.3)


def test_a_promise_given_up_stops_holding_and_a_new_loop_on_an_idle_engine_drops_stale_ones():
    a = Arrivals()
    a.arrive(LoopTag("L", streams=2), 1.0, True, 1.0)
    a.drop_due(1.0)
    assert not a.due(1.0) and a.timed_out == 1
    a.ended(LoopTag("L"), 2.0, announced=True)  # a cancelled cool-down's announced successor never comes
    a.arrive(LoopTag("M", streams=1), 2.0, idle=True, fallback=50.0)
    assert a.earliest() is None


def test_a_closed_loops_give_up_breaks_it_and_an_open_loops_does_not():
    a = Arrivals()
    closed, opened = LoopTag("C", 0, 2), LoopTag("O", 0, at=0.0, next_at=0.5)
    a.arrive(closed, 1.0, True, 1.0)
    a.arrive(opened, 1.0, False, 1.0)
    a.drop_due(2.0)  # both loops' promises (1.0 and 1.5) given up
    assert a.broken(closed) and not a.broken(opened)  # the open loop's lateness is on its record instead
    assert not a.broken(LoopTag("unknown"))
