"""The GPU server's scheduler (rank 0's engine thread) and the command loop of ranks 1..tp-1.

Continuous batching in SGLang's default shape, simplified: arrived requests are prefilled together, in
padded forwards of at most ``--chunked-prefill-size`` tokens (whole prompts: a prompt is not split), into the
next free cache rows, then one decode or speculative step serves every running
request; finished requests leave and the last row moves into the hole, so the batch stays compact.
Rank 0 broadcasts each step as a small int64 command over gloo, so every rank runs the same steps with
the same inputs (the tokens of rank 0).

Overlap (SGLang's overlap scheduler, TP1 without speculation, on unless ``--disable-overlap-schedule``): while
the batch stays the same, step N+1 is launched from the tokens step N left on the device before step N's tokens
are read back and streamed, so the host's work per step (emitting, the event loop) runs beside the device's. A
change of the batch (a request finished or aborted, a waiting one joins) first waits for the step in flight. A
request that ends at step N has one more token computed in step N+1, which is dropped.

Speculative acceptance: random weights make the draft and target disagree, so how many draft tokens a
verify pass accepts is a seeded draw: each draft token in turn is accepted with the declared
probability ``--speculative-accept-rate`` until the first rejection (one generator per request, seeded
from the server's seed and the prompt, so the same prompt gives the same output). The verify pass itself is real
and full-width; the tokens emitted are the accepted drafts plus the target's own next token.
``/get_server_info`` says ``speculative_acceptance: declared``.

N-gram speculation (``--speculative-algorithm NGRAM``, TP1): no draft model and nothing declared. Each step the
engine drafts ``k - 1`` tokens per request from its own prompt and output (:mod:`~framework.servers.gpu.ngram`),
the executor runs the verify pass, and the longest prefix of drafts equal to the target's greedy tokens plus the
target's next token is emitted: greedy outputs are those of plain decoding. A request with fewer proposals pads
its drafts (never accepted). Each response's ``meta_info`` carries SGLang's ``spec_verify_ct``,
``spec_draft_token_num`` and ``spec_accept_token_num``; ``/get_server_info`` the server's totals.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from framework.servers.api.request import Chunk, SimRequest, append_token
from framework.servers.gpu import ngram
from framework.servers.gpu.executor import Executor, Launched

log = logging.getLogger("framework.servers.gpu")

STOP, PREFILL, STEP, MOVE = 0, 1, 2, 3
HEADER = 4


@dataclass(frozen=True)
class SpecConfig:
    num_steps: int
    topk: int
    num_draft_tokens: int
    accept_rate: float
    algorithm: str = "EAGLE"  # NGRAM: drafts by n-gram lookup, accepted by the target's own greedy tokens


class Driver:
    """Runs each step on this rank and, at TP > 1, first broadcasts it to the other ranks."""

    def __init__(self, executor: Executor, context: int) -> None:
        self.ex = executor
        self.group = executor.group
        self.cmd = torch.zeros(HEADER + max(context, 2 * executor.max_rows), dtype=torch.long)

    def _send(self, op: int, a: int, b: int, payload: list[int]) -> None:
        if self.group.size == 1:
            return
        self.cmd[:HEADER] = torch.tensor([op, a, b, len(payload)])
        if payload:
            self.cmd[HEADER:HEADER + len(payload)] = torch.tensor(payload, dtype=torch.long)
        self.group.broadcast_command(self.cmd)

    def prefill(self, row: int, ids: list[int]) -> int:
        self._send(PREFILL, row, len(ids), ids)
        return self.ex.prefill(row, ids)

    def step(self, tokens: list[int], positions: list[int], drafts: list[list[int]] | None = None
             ) -> list[list[int]]:
        if drafts is not None and self.group.size > 1:
            raise RuntimeError("n-gram speculation runs at TP1")
        self._send(STEP, len(tokens), 0, tokens + positions)
        return self.ex.step(tokens, positions, drafts)

    def prefill_many(self, row0: int, prompts: list[list[int]]) -> list[int]:
        """One padded forward at TP1; at TP > 1 one prefill command per prompt (the command buffer holds one)."""
        if self.group.size == 1:
            return self.ex.prefill_many(row0, prompts)
        return [self.prefill(row0 + i, ids) for i, ids in enumerate(prompts)]

    @property
    def overlap(self) -> bool:
        """Whether decode steps can feed themselves on the device (the executor says: TP1, no speculation)."""
        return self.ex.overlap

    def set_batch(self, tokens: list[int], positions: list[int]) -> None:
        self.ex.set_batch(tokens, positions)

    def launch(self, rows: int) -> Launched:
        return self.ex.launch(rows)

    def collect(self, step: Launched) -> list[int]:
        return self.ex.collect(step)

    def move_row(self, src: int, dst: int) -> None:
        self._send(MOVE, src, dst, [])
        self.ex.move_row(src, dst)

    def stop(self) -> None:
        self._send(STOP, 0, 0, [])


def worker_loop(executor: Executor, context: int) -> None:
    """Ranks 1..tp-1: run rank 0's commands until STOP (or until rank 0 goes away and gloo fails)."""
    cmd = torch.zeros(HEADER + max(context, 2 * executor.max_rows), dtype=torch.long)
    while True:
        executor.group.broadcast_command(cmd)
        op, a, b, n = (int(x) for x in cmd[:HEADER])
        payload = cmd[HEADER:HEADER + n].tolist()
        if op == STOP:
            return
        if op == PREFILL:
            executor.prefill(a, payload)
        elif op == STEP:
            executor.step(payload[:a], payload[a:])
        elif op == MOVE:
            executor.move_row(a, b)


@dataclass
class _Live:
    """Scheduler state of one running request."""

    req: SimRequest
    rng: np.random.Generator  # the request's acceptance draws: the same prompt gives the same output
    pos: int = 0    # cache positions filled
    last: int = 0   # the newest token, not yet in the cache
    prompt: tuple[int, ...] = ()  # the n-gram drafter looks up the prompt and the output


class GpuEngine:
    """Rank 0's engine behind the shared HTTP layer (``framework.servers.api.server.ServingEngine``)."""

    def __init__(self, *, vocab: int, context: int, max_rows: int, seed: int, spec: SpecConfig | None,
                 load: Callable[[], Driver], on_ready: Callable[[], None], on_fail: Callable[[BaseException], None],
                 prefill_tokens: int = 4096) -> None:
        self.vocab, self.context, self.max_rows, self.seed, self.spec = vocab, context, max_rows, seed, spec
        self._load, self._on_ready, self._on_fail = load, on_ready, on_fail
        self.prefill_tokens = prefill_tokens  # padded prompt tokens per prefill forward
        self.driver: Driver | None = None
        self._cond = threading.Condition()
        self._inbox: deque[SimRequest] = deque()
        self._waiting: list[SimRequest] = []
        self._running: list[_Live] = []
        self._stop = False
        self._ids = itertools.count()
        self._perf0, self._epoch0 = time.perf_counter(), time.time()
        self.num_running = self.num_waiting = 0
        self.last_gen_throughput = 0.0
        self._accept_hist: deque[float] = deque(maxlen=64)
        self.spec_draft_token_num = self.spec_accept_token_num = self.spec_verify_ct = 0  # server totals (NGRAM)
        self.tokenize: Callable[[str], list[int]] | None = None  # the real model's tokenizer, for text prompts
        self.steps = 0
        # the overlap scheduler (TP1 without speculation; the driver says): the step on the device and its batch
        self.overlap = False
        self._inflight: tuple[Any, list[_Live]] | None = None
        self._last_take: float | None = None
        self._thread = threading.Thread(target=self._run, name="gpu-engine", daemon=True)

    # ----------------------------------------------------------------- any thread

    def wall(self, perf: float | None = None) -> float:
        return self._epoch0 + ((time.perf_counter() if perf is None else perf) - self._perf0)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def submit(self, req: SimRequest) -> None:
        req.arrival_perf = time.perf_counter()
        with self._cond:
            self._inbox.append(req)
            self._cond.notify_all()

    def abort(self, req: SimRequest) -> None:
        req.aborted = True

    @property
    def avg_spec_accept_length(self) -> float:
        return float(np.mean(self._accept_hist)) if self._accept_hist else 0.0

    # ----------------------------------------------------------------- engine thread

    def _run(self) -> None:
        try:
            self.driver = self._load()
            self.overlap = self.spec is None and self.driver.overlap
        except BaseException as exc:  # noqa: BLE001 - reported, then the server exits 1
            log.exception("start-up failed")
            self._on_fail(exc)
            return
        self._on_ready()
        try:
            self._loop()
        except Exception as exc:  # never die silently: every stream would hang
            log.exception("GPU engine crashed")
            self._on_fail(exc)
        finally:
            try:
                self.driver.stop()
            except Exception:  # noqa: BLE001 - the workers die with this process anyway
                pass

    def _prompt(self, req: SimRequest) -> list[int]:
        if req.prompt_ids is not None:
            ids = [int(t) % self.vocab for t in req.prompt_ids]
        elif self.tokenize is not None and req.prompt_text is not None:  # real weights: the model's own tokens
            ids = self.tokenize(req.prompt_text) or [0]
        else:
            ids = [int(t) for t in np.random.default_rng(req.seed).integers(0, self.vocab, req.prompt_tokens)]
        width = self.spec.num_draft_tokens if self.spec else 1
        room = self.context - width - 2
        if len(ids) > room // 2:  # keep the prompt's tail; leave half the context for output
            ids = ids[-(room // 2):]
        req.max_new_tokens = max(1, min(req.max_new_tokens, room - len(ids)))
        return ids

    def _loop(self) -> None:
        assert self.driver is not None
        while True:
            with self._cond:
                while self._inbox:
                    self._waiting.append(self._inbox.popleft())
                if self._stop:
                    return
                self._waiting = [r for r in self._waiting if not r.aborted]
                if not self._waiting and not self._running:
                    self.num_running = self.num_waiting = 0
                    self._cond.wait()
                    continue
            if self._inflight is not None:
                if not self._batch_changes():
                    self._decode_overlapped()  # step N+1 goes to the device, then step N's tokens stream
                    continue
                self._settle()  # the batch is about to change: the step in flight first
            self._drop([i for i, live in enumerate(self._running) if live.req.aborted])
            while self._waiting and len(self._running) < self.max_rows:
                batch: list[tuple[SimRequest, list[int]]] = []
                while self._waiting and len(self._running) + len(batch) < self.max_rows:
                    ids = self._prompt(self._waiting[0])
                    longest = max([len(i) for _, i in batch] + [len(ids)])
                    if batch and longest * (len(batch) + 1) > self.prefill_tokens:
                        break
                    batch.append((self._waiting.pop(0), ids))
                firsts = self.driver.prefill_many(len(self._running), [ids for _, ids in batch])
                for (req, ids), first in zip(batch, firsts, strict=True):
                    live = _Live(req, np.random.default_rng([self.seed, req.seed]), pos=len(ids), last=first,
                                 prompt=tuple(ids))
                    self._running.append(live)
                    self._emit(live, [first])
            self.num_waiting = len(self._waiting)
            self.num_running = len(self._running)
            self._drop([i for i, live in enumerate(self._running) if live.req.finished])
            if self._running and self.overlap:
                self.driver.set_batch([live.last for live in self._running], [live.pos for live in self._running])
                self._decode_overlapped()
            elif self._running:
                self._decode()

    # ----------------------------------------------------------------- overlapped decode (TP1, no speculation)

    def _batch_changes(self) -> bool:
        """Whether the running batch must change before the next step: a request finished or was aborted, or a
        waiting one can join."""
        return (bool(self._waiting) and len(self._running) < self.max_rows) or any(
            live.req.finished or live.req.aborted for live in self._running)

    def _decode_overlapped(self) -> None:
        """Launch the next step from the inputs the last one left on the device, then stream the last one."""
        assert self.driver is not None
        launched = self.driver.launch(len(self._running))
        previous, self._inflight = self._inflight, (launched, list(self._running))
        if previous is not None:
            self._take(*previous)

    def _settle(self) -> None:
        """Wait for the step in flight and stream it; the host's state is then the device's."""
        assert self._inflight is not None
        previous, self._inflight = self._inflight, None
        self._take(*previous)

    def _take(self, launched: Any, lives: list[_Live]) -> None:
        assert self.driver is not None
        t0 = time.perf_counter()
        tokens = self.driver.collect(launched)
        emitted = 0
        for live, tok in zip(lives, tokens, strict=True):
            if live.req.finished or live.req.aborted:
                continue  # a step launched before its request ended: the row's extra token is dropped
            live.pos += 1
            live.last = tok
            emitted += self._emit(live, [tok])
        self.steps += 1
        now = time.perf_counter()
        dt = now - (self._last_take or t0)
        self._last_take = now
        if dt > 0:
            self.last_gen_throughput = emitted / dt

    # ----------------------------------------------------------------- one step at a time

    def _decode(self) -> None:
        assert self.driver is not None
        t0 = time.perf_counter()
        ngram_drafts: list[list[int]] = []
        if self.spec is not None and self.spec.algorithm == "NGRAM":
            k = self.spec.num_draft_tokens
            ngram_drafts = [ngram.propose([*live.prompt, *live.req.output_ids], k - 1) for live in self._running]
            padded = [d + [d[-1] if d else live.last] * (k - 1 - len(d))
                      for d, live in zip(ngram_drafts, self._running, strict=True)]
            out = self.driver.step([live.last for live in self._running], [live.pos for live in self._running],
                                   padded)
        else:
            out = self.driver.step([live.last for live in self._running], [live.pos for live in self._running])
        emitted = 0
        for i, (live, toks) in enumerate(zip(self._running, out, strict=False)):
            if self.spec is None:
                new = toks
            elif self.spec.algorithm == "NGRAM":
                drafts = ngram_drafts[i]
                new = ngram.accept(drafts, toks[:len(drafts) + 1])
                r = live.req
                r.verify_ct += 1
                r.spec_draft_token_num += len(drafts)
                r.spec_accept_token_num += len(new) - 1
                self.spec_verify_ct += 1
                self.spec_draft_token_num += len(drafts)
                self.spec_accept_token_num += len(new) - 1
            else:
                k = self.spec.num_draft_tokens
                drafts, verified = toks[:k - 1], toks[k - 1:]
                accepted = 0
                for ok in live.rng.random(k - 1) < self.spec.accept_rate:
                    if not ok:
                        break
                    accepted += 1
                new = drafts[:accepted] + [verified[accepted]]
                live.req.verify_ct += 1
            live.pos += len(new)
            live.last = new[-1]
            emitted += self._emit(live, new)
        self.steps += 1
        dt = time.perf_counter() - t0
        if dt > 0:
            self.last_gen_throughput = emitted / dt
        self._drop([i for i, live in enumerate(self._running) if live.req.finished])

    def _drop(self, indices: list[int]) -> None:
        """Remove finished or aborted requests; the last row moves into each hole."""
        assert self.driver is not None
        for i in sorted(indices, reverse=True):
            last = len(self._running) - 1
            if i != last:
                self.driver.move_row(last, i)
                self._running[i] = self._running[last]
            self._running.pop()

    def _emit(self, live: _Live, tokens: list[int]) -> int:
        """Append up to the request's limit, stop at a stop string, hand a chunk to the HTTP layer."""
        r = live.req
        if r.aborted or r.finished:
            return 0
        finish: dict[str, Any] | None = None
        n = 0
        for tid in tokens[: r.max_new_tokens - len(r.output_ids)]:
            n += 1
            finish = append_token(r, tid)
            if finish:
                break
        if finish is None and len(r.output_ids) >= r.max_new_tokens:
            finish = {"type": "length", "length": len(r.output_ids)}
        r.finished = finish is not None
        if r.finished and self.spec and r.verify_ct:
            self._accept_hist.append(len(r.output_ids) / r.verify_ct)
        now = time.perf_counter()
        chunk = Chunk(
            index=r.chunks, new_tokens=n, completion_tokens=len(r.output_ids), output_ids=list(r.output_ids),
            text=r.text, finished=r.finished, finish_reason=finish, e2e_latency=now - r.arrival_perf,
            t_due_wall=self.wall(now), spec_verify_ct=r.verify_ct,
            spec_draft_token_num=r.spec_draft_token_num, spec_accept_token_num=r.spec_accept_token_num,
        )
        r.chunks += 1
        r.loop.call_soon_threadsafe(r.queue.put_nowait, chunk)
        return n
