"""How long a socket's bytes waited for the client: the event loop's polls, timed.

A read is stamped when the loop hands the bytes to the protocol (client.arrivals), which is after
they arrived by however long the loop was away from its selector. The loop's own polls say how long:
bytes handed over in a turn arrived after the previous turn's poll returned (else that poll would have
reported them), and if this turn's poll blocked they arrived while it waited and woke it. So a read at
``t`` in a turn whose poll ran from ``start`` to ``end``, after a poll that returned at ``prev_end``, waited

- ``t - end`` when the poll blocked (``end - start`` over ``BLOCKED_S``): the bytes woke it;
- ``(end - prev_end) / 2 + (t - end)`` otherwise: they arrived somewhere in the busy turn before, taken
  at its middle, then waited their place in this turn's callbacks.

This separates the client's lateness from a server's batching, which the events per read alone cannot
(issue 32): several events read at once behind a blocked poll were written at once. The self-check
(selfcheck.request_bias, criterion 4) reads these estimates; where the loop's selector cannot be wrapped
(another loop implementation) there are none and it falls back to criterion 3.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from typing import Any

BLOCKED_S = 0.0002  # a poll that took longer than this waited for its events (one with events ready returns in us)

_CLOCKS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, PollClock] = weakref.WeakKeyDictionary()


class PollClock:
    """The last two polls of one loop's selector (perf_counter seconds)."""

    __slots__ = ("start", "end", "prev_end")

    def __init__(self) -> None:
        self.start = self.end = self.prev_end = 0.0

    def waited(self, t: float) -> float | None:
        """The estimated wait of bytes handed over at `t` (module docstring); None before the first poll."""
        if self.end == 0.0:
            return None
        if self.end - self.start > BLOCKED_S or self.prev_end == 0.0:
            return max(0.0, t - self.end)
        return max(0.0, (self.end - self.prev_end) / 2 + (t - self.end))


def install(loop: asyncio.AbstractEventLoop) -> PollClock | None:
    """Time `loop`'s polls (once per loop); None where its selector is not asyncio's own (uvloop, Windows)."""
    if loop in _CLOCKS:
        return _CLOCKS[loop]
    selector: Any = getattr(loop, "_selector", None)
    select = getattr(selector, "select", None)
    if select is None:
        return None
    clock = PollClock()

    def timed(timeout: float | None = None, _select: Any = select, _now: Any = time.perf_counter,
              _clock: PollClock = clock) -> Any:
        a = _now()
        events = _select(timeout)
        _clock.prev_end, _clock.start, _clock.end = _clock.end, a, _now()
        return events

    try:
        selector.select = timed
    except (AttributeError, TypeError):
        return None
    _CLOCKS[loop] = clock
    return clock


def clock_of(loop: asyncio.AbstractEventLoop) -> PollClock | None:
    """The loop's poll clock, if `install` timed it."""
    return _CLOCKS.get(loop)
