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
from framework.servers.sim.profile import Profile

if TYPE_CHECKING:
    pass

log = logging.getLogger("framework.servers.sim.engine")

HOLD_TIMEOUT_S = 1.0  # wall seconds the model clock waits for an announced closed-loop request


class Engine:
    """Owns the model clock. Thread-safe ``submit``/``abort``; everything else runs in its thread."""

    def __init__(self, profile: Profile, args: SimServerArgs, seed: int,
                 on_step: Callable[[dict], None] | None = None, *, defer_random: bool = False) -> None:
        """``defer_random``: leave numpy (and the launch draw) to :meth:`init_random` or :meth:`start`,
        so the server can bind its port first; nothing else in the engine needs them before a request."""
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
        self._holding = False
        self._expected = 0  # closed-loop requests announced by finished requests and not yet arrived
        self.hold_timeout_s = HOLD_TIMEOUT_S
        self.holds_timed_out = 0
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
        self._step_rng = np.random.default_rng(step_ss)

    def start(self) -> None:
        self.init_random()
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()

    def submit(self, req: SimRequest) -> None:
        import numpy as np  # already imported by init_random

        req.rng = np.random.default_rng(self._req_ss.spawn(1)[0])
        req.draw = model.draw_request(self.profile, self.args, self.noise, req.rng)
        if not req.ignore_eos:
            req.eos_at = model.eos_position(self.profile, req.seed, req.temperature, req.rng)
        with self._cond:
            now = time.perf_counter()
            req.arrival_perf = now
            if self._holding:  # the model clock waits for a closed loop's next request: it arrives now
                req.arrival_model = self.model_now
                self._expected = max(0, self._expected - 1)
            else:
                req.arrival_model = max(self.model_now, self.model_of(now))
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

        Each step starts at the model time the previous one ended (or, from idle, when its first
        request became ready), lasts its model duration, and the thread sleeps until the wall time
        that maps to its end, so sleep overshoot never accumulates. When a request that announced a
        closed-loop successor finishes, the model clock holds (up to ``hold_timeout_s`` of wall time)
        until the successor arrives, which then arrives at the instant its predecessor ended: the wall
        time the client and HTTP take in between is not multiplied into model time.
        """
        import numpy as np  # already imported by init_random (start() calls it first)

        while True:
            with self._cond:
                while self._inbox:
                    self._pending.append(self._inbox.popleft())
                self._pending = [r for r in self._pending if not r.aborted]
                self._running = [r for r in self._running if not r.aborted]
                if self._stop:
                    return
                if self._expected > 0:
                    self._hold()
                    continue
                if not self._pending and not self._running:
                    self.num_running = self.num_waiting = 0
                    self._cond.wait()
                    continue
            now_model = self.model_now
            ready = [r for r in self._pending if r.ready_model <= now_model]
            if not ready and not self._running:  # idle until the first pending request is ready
                first = min(r.ready_model for r in self._pending)
                with self._cond:  # wake early on new arrivals, stop; re-evaluated next loop
                    self._cond.wait(timeout=max(0.0, self.wall_of(first) - time.perf_counter()))
                    if time.perf_counter() >= self.wall_of(first) and not self._inbox:
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
            emitted = self._finish_step(batch, kind, deadline, end_model)
            announced = sum(1 for r in batch if r.finished and r.closed_loop_next and not r.aborted)
            if announced:
                with self._cond:
                    self._expected += announced
            if kind == "prefill":
                self._running.extend(r for r in batch if not r.finished)
            self._running = [r for r in self._running if not r.finished]
            if dur_s > 0:
                self.last_gen_throughput = emitted / dur_s
            if self._on_step is not None:
                self._on_step({"kind": kind, "batch": len(batch), "model_s": dur_s, "tokens": emitted})

    def _hold(self) -> None:
        """(under the lock) Keep the model clock still until the announced requests arrived or time ran out;
        then map wall time onto the model clock afresh from here."""
        self._holding = True
        give_up = time.perf_counter() + self.hold_timeout_s
        try:
            while self._expected > 0 and not self._stop:
                left = give_up - time.perf_counter()
                if left <= 0:
                    self.holds_timed_out += 1
                    self._expected = 0
                    break
                self._cond.wait(timeout=left)
        finally:
            self._holding = False
            self._anchor_perf, self._anchor_model = time.perf_counter(), self.model_now

    @staticmethod
    def _sleep_until(deadline: float) -> None:
        while True:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                return
            time.sleep(remaining)

    def _finish_step(self, batch: list[SimRequest], kind: str, deadline: float, end_model: float) -> int:
        emitted = 0
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
            r.loop.call_soon_threadsafe(r.queue.put_nowait, chunk)
        return emitted

    @staticmethod
    def _extend(r: SimRequest, n: int) -> dict | None:
        """Append ``n`` pseudo-word tokens; stop at the first stop string."""
        for _ in range(n):
            finish = append_token(r, token_id(r.seed, len(r.output_ids)))
            if finish is not None:
                return finish
        return None
