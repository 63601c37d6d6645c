"""The continuous-batching scheduler: a dedicated thread that turns model durations into wall time.

Each step's model duration (from :mod:`framework.servers.sim.model`) is divided by ``--sim-speedup`` and
the thread sleeps until the step's *absolute* deadline, so sleep overshoot and bookkeeping never
accumulate (the next deadline is computed from the previous deadline, not from "now"). Finished
steps hand their chunks to the asyncio loop with ``loop.call_soon_threadsafe``.

Scheduling is SGLang's default shape, simplified: requests that have arrived (and been
"tokenized", ``request_overhead_us``) are prefilled together in one step, which delays the running
batch; otherwise one decode (or speculative verify) step serves every running request.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Callable

from framework.servers.api.request import Chunk, SimRequest, append_token
from framework.servers.api.tokens import token_id
from framework.servers.sim import model
from framework.servers.sim.args import SimServerArgs
from framework.servers.sim.arrivals import Arrivals
from framework.servers.sim.profile import Profile

if TYPE_CHECKING:
    pass

log = logging.getLogger("framework.servers.sim.engine")

HOLD_TIMEOUT_S = 10.0  # wall seconds the model clock waits, without any arrival, for a promised request


class Engine:
    """Owns the model clock. Thread-safe ``submit``/``abort``; everything else runs in its thread."""

    def __init__(self, profile: Profile, args: SimServerArgs, seed: int,
                 on_step: Callable[[dict], None] | None = None, *, defer_random: bool = False,
                 on_clock_gave_up: Callable[[str], None] | None = None) -> None:
        """``defer_random``: leave numpy (and the launch draw) to :meth:`init_random` or :meth:`start`,
        so the server can bind its port first; nothing else in the engine needs them before a request.
        ``on_clock_gave_up``: called (with one line saying what happened) when a give-up would make figures
        follow the wall clock; the server exits there (``sim_clock_gave_up``). Unset: it is only recorded."""
        self.profile, self.args = profile, args
        self.speedup = args.sim_speedup
        self.noise = args.sim_noise_scale
        self.spec = model.spec_config(profile, args)
        self.seed = seed
        self.launch: model.LaunchDraw | None = None
        if not defer_random:
            self.init_random()
        self._req_counter = itertools.count()
        self._cond = threading.Condition()
        self._inbox: deque[SimRequest] = deque()
        self._pending: list[SimRequest] = []
        self._running: list[SimRequest] = []
        self._stop = False
        self._deadline = 0.0
        # the model clock: model seconds; wall time maps onto it through the anchor (x speed-up)
        self.model_now = 0.0
        self._anchor_perf = time.perf_counter()
        self._anchor_model = 0.0
        self.arrivals = Arrivals()  # the client loops' promised arrivals (virtual time)
        self._live = 0  # requests submitted and not yet finished or aborted
        self.hold_timeout_s = HOLD_TIMEOUT_S
        self.clock_gave_up: str | None = None  # why the model clock could not keep its schedule (None: it did)
        self._on_clock_gave_up = on_clock_gave_up
        self._on_step = on_step
        self._perf0 = time.perf_counter()
        self._epoch0 = time.time()
        self.last_gen_throughput = 0.0
        self._accept_hist: deque[float] = deque(maxlen=64)
        self.num_running = 0
        self.num_waiting = 0
        self._thread = threading.Thread(target=self._run, name="sim-engine", daemon=True)

    # ----------------------------------------------------------------- public (any thread)

    def wall(self, perf: float | None = None) -> float:
        """Epoch seconds with perf_counter precision (one fixed offset, so it never jumps)."""
        return self._epoch0 + ((time.perf_counter() if perf is None else perf) - self._perf0)

    def init_random(self) -> None:
        """Seed the launch, per-request and per-step generators from ``seed`` (idempotent)."""
        if self.launch is not None:
            return
        import numpy as np

        seq = np.random.SeedSequence(self.seed)
        launch_ss, self._req_ss, step_ss = seq.spawn(3)
        self.launch = model.draw_launch(self.profile, self.noise, np.random.default_rng(launch_ss))
        machine = model.machine_factor(self.args)
        if machine != 1.0:  # the machine-level effect (off by default): every forward of this launch
            self.launch = model.LaunchDraw(self.launch.factor * machine, self.launch.slow)
        self._step_rng = np.random.default_rng(step_ss)

    def start(self) -> None:
        self.init_random()
        self._thread.start()

    @property
    def holds_timed_out(self) -> int:
        """Holds that gave up waiting for a promised request (mid-run, the launch fails: ``clock_gave_up``)."""
        return self.arrivals.timed_out

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()

    def submit(self, req: SimRequest) -> None:
        import numpy as np  # already imported by init_random

        with self._cond:
            now = time.perf_counter()
            req.arrival_perf = now
            fallback = max(self.model_now, self.model_of(now))
            tag = req.loop_tag
            if tag is not None and self.arrivals.broken(tag):
                self._gave_up(f"a request of client loop {tag.loop} (seq {tag.seq}) arrived after that loop's "
                              f"promise was given up; its arrival would follow the wall clock")
            if tag is not None:  # its loop says when it arrives on the model clock (arrivals.py)
                idle = self._live == 0  # nothing in flight: a new loop starts now (another's leftovers are stale)
                req.arrival_model, req.loop_arrival_s, serial = self.arrivals.arrive(tag, self.model_now, idle,
                                                                                     fallback)
                seq = next(self._req_counter) if tag.seq is None else tag.seq
                # the request's draws follow its place in the plan, not the order it happened to arrive in
                key = (1, seq) if serial == 0 else (1, seq, serial)
                req_ss = np.random.SeedSequence(self.seed, spawn_key=key)
                req.order = (req.arrival_model, serial, seq)
            else:
                req.arrival_model = fallback
                req_ss = self._req_ss.spawn(1)[0]
                req.order = (req.arrival_model, -1, next(self._req_counter))
            self._live += 1
            req.rng = np.random.default_rng(req_ss)
            req.draw = model.draw_request(self.profile, self.args, self.noise, req.rng)
            if not req.ignore_eos:
                req.eos_at = model.eos_position(self.profile, req.seed, req.temperature, req.rng)
            req.ready_model = req.arrival_model + self.profile.request_overhead_us / 1e6
            req.ready_perf = self.wall_of(req.ready_model)
            self._inbox.append(req)
            self._cond.notify_all()

    def model_of(self, perf: float) -> float:
        """The model time a wall instant maps to (speed-up x wall time since the last re-anchoring)."""
        return self._anchor_model + (perf - self._anchor_perf) * self.speedup

    def wall_of(self, model_t: float) -> float:
        return self._anchor_perf + (model_t - self._anchor_model) / self.speedup

    def abort(self, req: SimRequest) -> None:
        req.aborted = True

    def abort_rid(self, rid: str, abort_all: bool = False) -> None:
        """SGLang's /abort_request: one request by id (its stream ends), or all of them."""
        with self._cond:
            reqs = list(self._inbox) + self._pending + self._running
        for r in reqs:
            if abort_all or r.rid == rid:
                r.aborted = True
                r.loop.call_soon_threadsafe(r.queue.put_nowait, None)

    @property
    def avg_spec_accept_length(self) -> float:
        if not self._accept_hist:
            return 0.0
        import numpy as np

        return float(np.mean(self._accept_hist))

    # ----------------------------------------------------------------- engine thread

    def _run(self) -> None:
        try:
            self._loop()
        except Exception:  # never die silently: the server would hang every stream
            log.exception("sim engine crashed")

    def _loop(self) -> None:
        """One step after another on the model clock (``model_now``), paced to wall time.

        Each step starts at the model time the previous one ended (or, from idle, at the next event:
        the first pending request's ready time or the next promised arrival), lasts its model
        duration, and the thread sleeps until the wall time that maps to its end, so sleep overshoot
        never accumulates. Before every step the clock holds (wall time passes, model time does not;
        up to ``hold_timeout_s`` of wall time without an arrival) while a request its client's loop
        promised for an instant at or before ``model_now`` has not arrived (:mod:`arrivals`): a closed
        loop's first burst and each stream's next request, an open loop's next scheduled arrival. So
        the steps never depend on when a request happened to reach the server on the wall clock.
        """
        import numpy as np  # already imported by init_random (start() calls it first)

        while True:
            with self._cond:
                while self._inbox:
                    self._pending.append(self._inbox.popleft())
                self._pending = self._drop_aborted(self._pending)
                self._running = self._drop_aborted(self._running)
                if self._stop:
                    return
                if self.arrivals.due(self.model_now):
                    self._hold()
                    continue
                promised = self.arrivals.earliest()
                if not self._pending and not self._running:
                    self.num_running = self.num_waiting = 0
                    if promised is not None:  # idle until the promised arrival: jump there and hold for it
                        self.model_now = max(self.model_now, promised)
                    else:
                        self._cond.wait()
                    continue
            now_model = self.model_now
            self._pending.sort(key=lambda r: r.order)
            ready = [r for r in self._pending if r.ready_model <= now_model]
            if not ready and not self._running:  # idle until the first pending request is ready
                first = min(r.ready_model for r in self._pending)
                if promised is not None and promised < first:
                    with self._cond:
                        self.model_now = max(self.model_now, promised)
                    continue
                with self._cond:  # wake early on new arrivals, stop; re-evaluated next loop
                    self._cond.wait(timeout=max(0.0, self.wall_of(first) - time.perf_counter()))
                    if not self._inbox:  # nothing can arrive before ``first`` except unpromised requests
                        self.model_now = max(self.model_now, first)
                continue
            cap = self.args.max_running_requests
            if cap is not None:  # SGLang admits no more than --max-running-requests into the batch
                ready = ready[:max(0, cap - len(self._running))]
            self.num_waiting = len(self._pending) - len(ready)
            if ready:
                batch, kind = ready, "prefill"
                ready_ids = {id(r) for r in ready}
                self._pending = [r for r in self._pending if id(r) not in ready_ids]
                cost = model.prefill_step(self.profile, self.args, sum(r.prompt_tokens for r in ready))
            else:
                batch, kind = list(self._running), "decode"
                cost = model.decode_step(self.profile, self.args, len(batch))
            self.num_running = len(self._running) + (len(batch) if kind == "prefill" else 0)
            jitter = float(np.mean([r.draw.time_factor for r in batch]))
            dur_s = cost.total_us / 1e6 * self.launch.factor * jitter * model.draw_step_factor(
                self.profile, self.noise, self._step_rng)
            end_model = now_model + dur_s
            deadline = self.wall_of(end_model)
            self._sleep_until(deadline)
            with self._cond:
                self.model_now = end_model
            self._deadline = deadline
            emitted, posts = self._finish_step(batch, kind, deadline, end_model)
            with self._cond:  # the promises of the finished requests are made before their clients hear of it
                for r in batch:
                    if r.finished and not r.aborted:
                        self._ended(r, end_model, announced=r.closed_loop_next)
            for r, chunk in posts:
                r.loop.call_soon_threadsafe(r.queue.put_nowait, chunk)
            if kind == "prefill":
                self._running.extend(r for r in batch if not r.finished)
            self._running = [r for r in self._running if not r.finished]
            if dur_s > 0:
                self.last_gen_throughput = emitted / dur_s
            if self._on_step is not None:
                self._on_step({"kind": kind, "batch": len(batch), "model_s": dur_s, "tokens": emitted})

    def _ended(self, r: SimRequest, model_t: float, announced: bool) -> None:
        """(under the lock) ``r`` left the engine: count it out once, and let its loop promise what follows."""
        if r.left:
            return
        r.left = True
        self._live -= 1
        if r.loop_tag is not None:
            self.arrivals.ended(r.loop_tag, model_t, announced)

    def _drop_aborted(self, reqs: list[SimRequest]) -> list[SimRequest]:
        """(under the lock) The requests still wanted; the aborted ones leave the engine now."""
        for r in reqs:
            if r.aborted:
                self._ended(r, self.model_now, announced=False)
        return [r for r in reqs if not r.aborted]

    def _hold(self) -> None:
        """(under the lock) Keep the model clock still until a promised request arrives or the wall grace runs
        out without one (then its promise is given up); then map wall time onto the model clock afresh."""
        arrived = self._cond.wait(timeout=self.hold_timeout_s)
        if not arrived and not self._inbox and not self._stop:
            self.arrivals.drop_due(self.model_now)
            waiting = sum(not r.aborted for r in self._pending + self._running)
            if waiting:  # mid-run: the steps would go on without the promised request, by the wall clock
                self._gave_up(f"a promised request did not arrive within {self.hold_timeout_s:.0f} s of wall time "
                              f"while {waiting} requests were in flight (model time {self.model_now:.6f} s)")
            else:  # a loop's end: a cancelled cool-down stream had announced a successor; nothing depends on it
                log.warning("sim: a promised request did not arrive within %.0f s of wall time with nothing in "
                            "flight (a loop's end); its loop takes no more requests", self.hold_timeout_s)
        self._anchor_perf, self._anchor_model = time.perf_counter(), self.model_now

    def _gave_up(self, why: str) -> None:
        """The model clock could not keep its loop's schedule: never serve an estimate that follows the wall."""
        self.clock_gave_up = self.clock_gave_up or why
        log.error("sim_clock_gave_up: %s", why)
        if self._on_clock_gave_up is not None:
            self._on_clock_gave_up(why)

    @staticmethod
    def _sleep_until(deadline: float) -> None:
        while True:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                return
            time.sleep(remaining)

    def _finish_step(self, batch: list[SimRequest], kind: str, deadline: float,
                     end_model: float) -> tuple[int, list[tuple[SimRequest, Chunk]]]:
        """Advance every request of the step; (tokens emitted, the chunks to hand to the HTTP layer)."""
        emitted = 0
        posts: list[tuple[SimRequest, Chunk]] = []
        for r in batch:
            if r.aborted:
                continue
            limit = r.max_new_tokens if r.eos_at is None else min(r.max_new_tokens, r.eos_at)
            remaining = limit - len(r.output_ids)
            if kind == "prefill":
                n = min(1, remaining)
            else:
                n = model.tokens_for_step(self.spec, r.draw, self.noise, r.step_index, remaining, r.rng)
                r.step_index += 1
                r.verify_ct += 1 if self.spec else 0
                r.batch_sum += len(batch)
                r.decode_steps += 1
            finish = self._extend(r, n)
            emitted += n
            if finish is None and r.eos_at is not None and len(r.output_ids) >= r.eos_at:
                finish = {"type": "stop", "matched": self.profile.output_length.eos_token_id}
            if finish is None and len(r.output_ids) >= r.max_new_tokens:
                finish = {"type": "length", "length": len(r.output_ids)}
            r.finished = finish is not None
            if r.finished and self.spec and r.verify_ct:
                self._accept_hist.append(len(r.output_ids) / r.verify_ct)
            chunk = Chunk(
                index=r.chunks, new_tokens=n, completion_tokens=len(r.output_ids),
                output_ids=list(r.output_ids), text=r.text, finished=r.finished, finish_reason=finish,
                e2e_latency=end_model - r.arrival_model, t_due_wall=self.wall(deadline),
                spec_verify_ct=r.verify_ct, mean_batch=r.batch_sum / r.decode_steps if r.decode_steps else 0.0,
            )
            r.chunks += 1
            posts.append((r, chunk))
        return emitted, posts

    @staticmethod
    def _extend(r: SimRequest, n: int) -> dict | None:
        """Append ``n`` pseudo-word tokens; stop at the first stop string."""
        for _ in range(n):
            finish = append_token(r, token_id(r.seed, len(r.output_ids)))
            if finish is not None:
                return finish
        return None
