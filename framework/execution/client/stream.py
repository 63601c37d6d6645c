"""Reading a streamed response: server-sent events into token counts, and chunk times into the request's figures.

- `generate` (SGLang's native `POST /generate`): token counts from the cumulative
  `meta_info.completion_tokens` of every event;
- `completions` / `chat` (OpenAI, `stream: true` with `stream_options` `include_usage` and
  `continuous_usage_stats`): a chunk's tokens are the growth of its cumulative `usage.completion_tokens`
  (vLLM and SGLang send it on every chunk when asked), so a chunk carrying several tokens counts them
  all; a server that sends no per-chunk usage gets one token per content chunk, and the total comes
  from the final `usage` (else the number of content chunks, and the row says so).

A request's decode is measured from those per-chunk counts (framework.core.metrics.decode): the
tokens after the first chunk over the time from the first chunk to the last. When there is no such
interval (every token in one chunk, one token, no time between chunks) the request keeps its other
figures and says why (`decode_unmeasured`); the analysis counts it as lost for a decode metric. Every
token in one chunk is the server's merge (`one_chunk`) only when they came in one event; several events
read together are the client's late read (`one_read`, `read_together`), never blamed on the server.

Every chunk's arrival time and token count is kept, so the derived figures can be recomputed from
the raw data (framework.core.metrics). Durations are multiplied by `time_scale` (the simulator's
speed-up, 1 for real servers) so every figure is on the model's clock. Everything here is pure.
"""

from __future__ import annotations

import json
import re
from typing import Any

from framework.core.metrics import decode
from framework.core.workload import Endpoint


def sse_data(event: bytes) -> bytes:
    """The data of one server-sent event; b"" for a comment-only event.

    Lines starting with ":" are SSE comments (sse-starlette's keep-alive `: ping - <time>`, which
    llama-cpp-python's server sends every 15 s of a stream), and `event:`, `id:` and `retry:`
    lines carry no data; none of them is a token.
    """
    lines = [ln for ln in event.strip().splitlines() if not ln.startswith((b":", b"event:", b"id:", b"retry:"))]
    return b"\n".join(ln.removeprefix(b"data:").strip() for ln in lines)


_COUNT = re.compile(rb'"completion_tokens": ?(\d+)')
_FINISH_NULL = (b'"finish_reason":null', b'"finish_reason": null')


class MalformedEvent(ValueError):
    """An SSE event that is not the JSON the endpoint sends (the message says after how many tokens)."""


class StreamParser:
    """Per-endpoint parsing of SSE events into (token count) and the final metadata.

    `event` decodes an event's JSON. `fast_event` first tries to read a plain mid-stream event from its
    bytes: once the stream has shown a cumulative count (SGLang's ``meta_info.completion_tokens``, an
    OpenAI chunk's ``usage.completion_tokens``) and no sim timestamps, an event with no error and a null
    finish reason carries exactly the growth of its count, which one regular-expression match finds;
    anything else (the first events, the last, errors, usage-only chunks) is decoded whole.
    """

    def __init__(self, endpoint: Endpoint, capture: Any = None) -> None:
        self.endpoint = endpoint
        self.capture = capture  # an OutputCapture (client.capture): every event is then decoded, and kept there
        self.meta: dict[str, Any] = {}
        self.seen = 0
        self.cumulative = False  # the stream's events carry a cumulative token count (fast_event may count them)
        self.usage_behind = False  # fast_event counted a chunk after the last decoded usage: `seen` is its count
        self.finished = False
        self.usage: dict[str, Any] | None = None
        self.error: str | None = None  # an error the server sent as an event (SGLang: a request too long)
        # the simulator's own clock, per token-carrying event: (sim_model_t, tokens); None once an event lacks it
        self.model_events: list[tuple[float, int]] | None = []

    def _stamp(self, model_t: Any, tokens: int) -> None:
        if self.model_events is None or not tokens:
            return
        if model_t is None:
            self.model_events = None
        else:
            self.model_events.append((float(model_t), tokens))

    def event(self, data: bytes) -> int:
        """Tokens carried by one event's payload (0 for role-only, empty or usage-only chunks)."""
        payload = json.loads(data)
        if isinstance(payload, dict) and payload.get("error"):
            err = payload["error"]
            self.error = str(err.get("message", err) if isinstance(err, dict) else err)[:300]
            return 0
        if self.capture is not None:
            self.capture.take(self.endpoint, payload)
        if self.endpoint == "generate":
            meta = payload.get("meta_info") or {}
            self.meta = meta
            if "completion_tokens" in meta:
                self.cumulative = True
            count = int(meta.get("completion_tokens", self.seen))
            new, self.seen = count - self.seen, count
            if meta.get("finish_reason"):
                self.finished = True
            self._stamp(meta.get("sim_model_t"), new)
            return new
        usage = payload.get("usage")
        if usage:
            self.usage = usage
            self.usage_behind = False
        for key in ("sim_mean_batch", "sim_arrival_model_s"):  # the sim's extra keys on OpenAI chunks
            if key in payload:
                self.meta[key] = payload[key]
        choices = payload.get("choices") or []
        if not choices:
            return 0
        choice = choices[0]
        text = (choice.get("delta") or {}).get("content") if self.endpoint == "chat" else choice.get("text")
        if choice.get("finish_reason"):
            self.finished = True
        cumulative = (usage or {}).get("completion_tokens")
        if isinstance(cumulative, int) and not isinstance(cumulative, bool):  # continuous usage: the chunk's growth
            new = max(0, cumulative - self.seen)
            self.cumulative = True
        else:
            new = 1 if text else 0
        self.seen += new
        self._stamp(payload.get("sim_model_t"), new)
        return new

    def fast_event(self, data: bytes) -> int:
        """Tokens carried by one event's payload, as `event` counts them, without decoding a plain one.

        Plain: the stream has shown a cumulative count and no sim timestamps (``model_events`` is None only
        once a token event came without one), and the event has a null finish reason (a usage-only chunk
        has none) and no error. The count is the last ``"completion_tokens":`` key (in the JSON text it
        cannot occur unescaped); anything else is decoded whole.
        """
        plain = self.cumulative and self.model_events is None and self.capture is None  # a capture decodes all
        if plain and (_FINISH_NULL[0] in data or _FINISH_NULL[1] in data) and b'"error"' not in data:
            at = data.rfind(b'"completion_tokens":')
            m = _COUNT.match(data, at) if at >= 0 else None
            if m is not None:
                count = int(m.group(1))
                if self.endpoint == "generate":
                    new, self.seen = count - self.seen, count
                else:
                    new = max(0, count - self.seen)
                    self.seen += new
                    self.usage_behind = True
                return new
        return self.event(data)


class ChunkReader:
    """Raw reads of a stream, each with its arrival time, into the request's chunks (pure but for its state).

    A read's bytes are split into events on bytes; events that completed in the same read arrived
    together and make one chunk (its time, its tokens, its token-carrying events). Parsing follows the
    stamp, never precedes it, and plain events are counted from their bytes (StreamParser.fast_event).
    """

    def __init__(self, parser: StreamParser) -> None:
        self.parser = parser
        self.tail = b""
        self.times: list[float] = []
        self.tokens: list[int] = []
        self.events: list[int] = []  # token-carrying events per chunk (the self-check's events per read)
        self.waits: list[float | None] = []  # per chunk: how long its bytes waited for the loop (client.polls)
        self.total = 0
        self._generate = parser.endpoint == "generate"

    def read(self, now: float, piece: bytes, waited: float | None = None) -> None:
        """One read that arrived at `now` after its bytes waited `waited` for the loop (None: not known).
        Raises MalformedEvent for an event that is not the endpoint's JSON."""
        parts = (self.tail + piece if self.tail else piece).split(b"\n\n")
        self.tail = parts.pop()
        got = carrying = events = 0
        for ev in parts:
            data = ev[6:] if ev[:6] == b"data: " and b"\n" not in ev else sse_data(ev)
            if not data or data == b"[DONE]":
                continue
            try:
                new = self.parser.fast_event(data)
            except (ValueError, TypeError, AttributeError) as exc:  # not the JSON event expected
                raise MalformedEvent(f"malformed event after {self.total + got} tokens: "
                                     f"{type(exc).__name__}: {exc}") from None
            got += new
            carrying += new > 0
            events += 1
        if got or (events and self._generate):
            self.times.append(now)
            self.tokens.append(got)
            self.events.append(carrying)
            self.waits.append(waited)
            self.total += got


def read_together(tokens: list[int], events: list[int] | None) -> bool:
    """Whether a request's one token-carrying chunk held several token-carrying events.

    A server that merges tokens sends them in one event (vLLM's delta of several tokens, a cumulative
    count that jumped); separate events that arrived in one read were written apart and read together:
    the client fell behind (its loop starved of CPU, the kernel's buffer holding several writes), or the
    server's writes came at once. Either way the server did not merge them, so the loss is not the
    server's (`one_read`, framework.core.vocabulary.DECODE_UNMEASURED).
    """
    if not events or len(events) != len(tokens):
        return False
    carrying = [e for e, n in zip(events, tokens, strict=True) if n > 0]
    return len(carrying) == 1 and carrying[0] > 1


def token_times(times: list[float], tokens: list[int]) -> list[float]:
    """The arrival times of the chunks that carried tokens (the metrics' first and last token)."""
    return [t for t, n in zip(times, tokens, strict=False) if n > 0]


def summarize_stream(times: list[float], tokens: list[int], e2e: float, time_scale: float, meta: dict[str, Any],
                     completion: int | None = None, events: list[int] | None = None) -> dict[str, Any]:
    """Derived per-request figures from raw chunk times (seconds since send) and token counts.

    `completion` overrides the sum of chunk tokens (an OpenAI stream's `usage`); `events`, the token-carrying
    events per chunk (ChunkReader.events), tells a server's merge from the client's late read (`one_read`).
    """
    completion = int(sum(tokens)) if completion is None else int(completion)
    arrivals = token_times(times, tokens)
    n, span, why = decode(times, tokens, completion)
    if why == "one_chunk" and read_together(tokens, events):
        why = "one_read"
    span = None if span is None else span * time_scale
    out: dict[str, Any] = {
        "completion_tokens": completion,
        "e2e_s": e2e * time_scale,
        "ttft_s": arrivals[0] * time_scale if arrivals else None,
        "tpot_s": span / n if n and span else None,
        "decode_tok_s": n / span if n and span else None,
        "output_tok_s": completion / (e2e * time_scale) if e2e > 0 else None,
        "accept_length": None,
        "decode_tokens": n,
        "decode_s": span,
        "decode_unmeasured": why,
    }
    if meta.get("spec_accept_length") is not None:
        out["accept_length"] = float(meta["spec_accept_length"])
    elif meta.get("spec_verify_ct"):
        out["accept_length"] = completion / float(meta["spec_verify_ct"])
    return out


def clock_figures(times: list[float], tokens: list[int], e2e: float, time_scale: float, meta: dict[str, Any],
                  completion: int | None, parser: StreamParser, events: list[int] | None = None) -> dict[str, Any]:
    """The request's figures on the model's clock.

    When every token-carrying event carries the simulator's own timestamp (``sim_model_t``: model
    seconds from the request's arrival at its engine), the figures are taken from those: the client
    measures the schedule the server ran, and what cannot be scaled (HTTP, parsing, the event loops'
    wake-ups: a few ms of wall time, x the speed-up) stays out. The wall-clock figures (x
    ``time_scale``) are kept beside them as ``wall_*``. Any other server: the wall clock, as always.
    docs/model.md, "Timing".
    """
    wall = summarize_stream(times, tokens, e2e, time_scale, meta, completion, events)
    events = parser.model_events
    if not events or not parser.finished:
        return {**wall, "clock": "wall"}
    for key in ("decode_tokens", "decode_s", "decode_unmeasured"):  # the model clock's, below
        wall.pop(key)
    m_times, m_tokens = [t for t, _ in events], [n for _, n in events]
    out = summarize_stream(m_times, m_tokens, m_times[-1], 1.0, meta, completion)
    out.update(clock="sim_model", chunk_model_times_s=[round(t, 7) for t in m_times], chunk_model_tokens=m_tokens)
    out.update({f"wall_{k}": wall[k] for k in ("ttft_s", "tpot_s", "e2e_s", "decode_tok_s", "output_tok_s")})
    for key in ("sim_mean_batch", "sim_arrival_model_s"):
        if meta.get(key) is not None:
            out[key] = meta[key]
    return out
