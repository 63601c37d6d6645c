"""A request as any engine we ship sees it, and the chunks it hands back to the HTTP layer."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from framework.servers.api.tokens import token_text

if TYPE_CHECKING:
    import numpy as np


@dataclass
class Chunk:
    """What one step gave one request; ``text`` and ``completion_tokens`` are cumulative."""

    index: int
    new_tokens: int
    completion_tokens: int
    output_ids: list[int]
    text: str
    finished: bool
    finish_reason: dict | None
    e2e_latency: float          # model seconds since arrival
    t_due_wall: float           # wall time (epoch s) the model scheduled this chunk for
    spec_verify_ct: int
    spec_draft_token_num: int = 0   # drafted and accepted tokens so far (engines that draft for real: NGRAM)
    spec_accept_token_num: int = 0
    mean_batch: float = 0.0     # mean running batch of the decode steps this request took part in so far


@dataclass(frozen=True)
class LoopTag:
    """Where a request sits in its client's loop (the sim's ``X-Sim-Loop`` header), so the sim can admit it on
    its model clock instead of when it happened to arrive: ``loop`` names the client's run, ``seq`` the
    request's index in its plan; a closed loop says how many ``streams`` it runs, an open loop each
    request's scheduled arrival ``at`` (model seconds from the loop's start), the ``next_at`` of the request
    after it (None: the last) and its ``cap`` on requests in flight."""

    loop: str
    seq: int | None = None
    streams: int | None = None
    at: float | None = None
    next_at: float | None = None
    cap: int | None = None

    @property
    def open(self) -> bool:
        return self.at is not None


def parse_loop_tag(value: str) -> LoopTag | None:
    """``id=ab12;seq=3;streams=16`` (closed) or ``id=ab12;seq=3;at=0.25;next=0.31;cap=8`` (open); None when
    malformed (the request is then served as an untagged one, on the wall clock)."""
    fields = dict(part.split("=", 1) for part in value.split(";") if "=" in part)
    try:
        def num(key: str, kind: type) -> Any:
            raw = fields.get(key)
            return None if raw in (None, "", "-") else kind(raw)

        return LoopTag(fields["id"], num("seq", int), num("streams", int), num("at", float), num("next", float),
                       num("cap", int))
    except (KeyError, ValueError):
        return None


@dataclass
class SimRequest:
    """A request as the engine sees it; the HTTP layer reads chunks from ``queue``."""

    rid: str
    prompt_tokens: int
    max_new_tokens: int
    stop: list[str]
    seed: int
    queue: asyncio.Queue
    loop: asyncio.AbstractEventLoop
    prompt_ids: list[int] | None = None  # the prompt's token ids when sent as ids (engines that compute on them)
    prompt_text: str | None = None  # the prompt when sent as text (an engine with a real tokenizer reads it)
    arrival_perf: float = 0.0
    ready_perf: float = 0.0
    draw: Any = None  # the engine's own per-request draw (the sim's model.RequestDraw)
    rng: np.random.Generator | None = None
    output_ids: list[int] = field(default_factory=list)
    text: str = ""
    step_index: int = 0
    verify_ct: int = 0
    spec_draft_token_num: int = 0
    spec_accept_token_num: int = 0
    chunks: int = 0
    aborted: bool = False
    finished: bool = False
    max_lag_s: float = 0.0      # wall seconds the hand-off of a chunk ran past its due time (worst)
    first_lag_s: float = 0.0    # ... of the first chunk (TTFT and the decode span start there)
    last_lag_s: float = 0.0     # ... of the last chunk (e2e and the decode span end there)
    batch_sum: int = 0          # sum of the batch sizes of the decode steps this request took part in
    decode_steps: int = 0
    closed_loop_next: bool = False  # the client sends its next request the moment this one ends
    ignore_eos: bool = True     # False: the model's EOS ends the sequence (model.eos_position)
    temperature: float = 0.0
    eos_at: int | None = None
    arrival_model: float = 0.0  # model seconds on the engine's clock
    ready_model: float = 0.0
    loop_tag: LoopTag | None = None  # its place in the client's loop (the sim admits it by that)
    loop_arrival_s: float | None = None  # its arrival on its loop's clock (model s from the loop's start)
    order: tuple = ()  # the engine's admission order among requests ready at once
    left: bool = False  # the engine has counted it out (finished or aborted)


def append_token(r: SimRequest, tid: int) -> dict | None:
    """Append one token to ``r``'s output; at the first stop string it completes, trim the text there
    (as SGLang does) and return the finish reason.

    Only the text a stop string could newly end in is searched (the earlier text held none),
    so a long output costs linear, not quadratic, time on the engine thread."""
    r.output_ids.append(tid)
    before = len(r.text)
    r.text += token_text(tid)
    for s in r.stop:
        pos = r.text.find(s, max(0, before - len(s) + 1))
        if s and pos >= 0:
            r.text = r.text[:pos]
            return {"type": "stop", "matched": s}
    return None
