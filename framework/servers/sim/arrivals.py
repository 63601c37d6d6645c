"""Virtual arrivals: when a tagged request reaches the sim's model clock, and which arrivals the clock must
wait for before it may run another step.

The engine advances its model clock only on events. A client's loop tells it (``X-Sim-Loop``,
:class:`~framework.servers.api.request.LoopTag`) what the next events are:

- a closed loop of N streams: its first request promises N - 1 more at the same model instant (the
  first burst), and each request that ends with ``X-Sim-Closed-Loop: next`` promises its successor
  at the instant it ended;
- an open loop: each request carries its scheduled arrival (model seconds from the loop's start) and
  the next one's, so the next request is promised at its schedule; with a cap on requests in flight,
  not before a slot frees.

A promised request arrives at its promised instant whatever the wall clock did meanwhile, and the
engine holds (wall time passes, model time does not) while a promise is due and unmet. So the same
seed serves the same schedule at any speed-up and any load: a slow machine makes the run slower,
not different. A promise the engine gives up (no arrival within its wall grace) while requests are in flight
fails the launch (``sim_clock_gave_up``), and so does a closed loop's request that comes after one of
its promises was given up. An open loop's request that comes late (an idle engine waits at most the
grace for it) still arrives by the wall clock; its lateness is on the record (sim_open_loop_arrival_late).
Pure bookkeeping, no clock and no I/O: the engine calls it under its lock.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from framework.servers.api.request import LoopTag


@dataclass
class Loop:
    """One client loop as the engine has seen it so far."""

    serial: int                 # the order the engine met its loops in (0: the first)
    open: bool
    origin: float               # model time of the loop's start
    owed: list[float] = field(default_factory=list)  # closed: promised arrivals not yet met
    next_at: float | None = None  # open: the next request's schedule (loop seconds); None: no more
    cap: int | None = None
    in_flight: int = 0
    free_at: float | None = None  # open: not before this (the last arrival, or when a slot freed at the cap)
    gave_up: bool = False       # closed: a promise was given up, so a later request of it would follow the wall

    def promise(self) -> float | None:
        """The model time of this loop's next promised arrival, or None (nothing promised, or blocked on a slot)."""
        if not self.open:
            return min(self.owed) if self.owed else None
        if self.next_at is None or (self.cap is not None and self.in_flight >= self.cap):
            return None
        t = self.origin + self.next_at
        return t if self.free_at is None else max(t, self.free_at)


class Arrivals:
    """Every loop's promises; ``arrive`` stamps a request, ``ended`` records one leaving the engine."""

    def __init__(self) -> None:
        self.loops: dict[str, Loop] = {}
        self.timed_out = 0

    def due(self, model_now: float) -> bool:
        """Some promised arrival is at or before ``model_now`` and has not come: the clock must hold."""
        return any(p is not None and p <= model_now for p in (lp.promise() for lp in self.loops.values()))

    def earliest(self) -> float | None:
        """The earliest promised arrival (None: nothing promised)."""
        times = [p for p in (lp.promise() for lp in self.loops.values()) if p is not None]
        return min(times) if times else None

    def arrive(self, tag: LoopTag, model_now: float, idle: bool, fallback: float) -> tuple[float, float, int]:
        """(arrival on the model clock, arrival on the loop's clock, the loop's serial) of a tagged request.

        A loop's first request starts it at ``model_now`` when the engine is idle (nothing in flight),
        else at ``fallback`` (the wall clock mapped onto the model clock: a second client meanwhile).
        A request no promise covered (its promise timed out, or its predecessor was aborted) arrives at
        ``fallback`` too, never before ``model_now``.
        """
        loop = self.loops.get(tag.loop)
        if loop is None:
            if idle:
                for other in self.loops.values():  # an idle engine: an earlier loop's leftovers are stale
                    other.owed.clear()
                    other.next_at = None
            start = model_now if idle else fallback
            loop = Loop(len(self.loops), tag.open, start)
            self.loops[tag.loop] = loop
            if not tag.open:
                loop.owed = [start] * max(0, (tag.streams or 1) - 1)
                arrival = start
            else:
                arrival = start + (tag.at or 0.0)
        elif not loop.open:
            if loop.owed:
                arrival = min(loop.owed)
                loop.owed.remove(arrival)
            else:
                arrival = max(model_now, fallback)
        else:
            promised = loop.promise()
            arrival = promised if promised is not None else max(model_now, loop.origin + (tag.at or 0.0))
        if loop.open:  # the client sends in order, so the next request comes no earlier than this one
            loop.next_at, loop.cap, loop.free_at = tag.next_at, tag.cap, arrival
        loop.in_flight += 1
        return arrival, arrival - loop.origin, loop.serial

    def ended(self, tag: LoopTag, model_t: float, announced: bool) -> None:
        """A request of ``tag``'s loop left the engine at ``model_t`` (finished, or aborted); ``announced``: it
        finished and its stream sends its successor now."""
        loop = self.loops.get(tag.loop)
        if loop is None:
            return
        loop.in_flight -= 1
        if loop.open and loop.cap is not None and loop.in_flight == loop.cap - 1:  # a slot frees at the cap
            loop.free_at = model_t if loop.free_at is None else max(loop.free_at, model_t)
        if announced and not loop.open:
            loop.owed.append(model_t)

    def broken(self, tag: LoopTag) -> bool:
        """``tag``'s loop had a promise given up: its request would arrive by the wall clock, not its schedule."""
        loop = self.loops.get(tag.loop)
        return loop is not None and loop.gave_up

    def drop_due(self, model_now: float) -> None:
        """Give up the promises due by ``model_now`` (their requests did not come within the wall grace)."""
        self.timed_out += 1
        for loop in self.loops.values():
            if loop.open:  # a late open-loop arrival: its lateness is on the record (sim_open_loop_arrival_late)
                p = loop.promise()
                if p is not None and p <= model_now:
                    loop.next_at = None
            else:
                kept = [t for t in loop.owed if t > model_now]
                loop.gave_up |= len(kept) < len(loop.owed)
                loop.owed = kept
