"""What one request measured, typed: the client's row before `on_row` receives it as a dict.

Modelled on vLLM's `RequestFuncOutput` (benchmarks/lib/endpoint_request_func.py): one flat record
per request, built by `measure_request` (what the stream showed) and completed by the load loop
(the plan's side: phase, planned lengths, schedule). Unlike vLLM's it keeps every chunk's raw
arrival time and token count, so the figures can be recomputed from the record (audit).

`to_row()` is the one conversion to the dict written to trials.jsonl. Its keys, their order and
their values are those the client has always written (tests/execution/test_request_result.py pins
them): a key that only some requests carry is left out, not written as null, exactly as before.
`decode_tokens` and `decode_s` (what the launch's ratio estimate of decode sums) are written where
decode was measured, `decode_unmeasured` (why not) where it was not.
A frozen dataclass rather than a pydantic model for that reason too: nothing is coerced (an int a
server sends stays an int), so the row's bytes cannot change.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Literal

from framework.core.vocabulary import DecodeUnmeasured
from framework.core.workload import Endpoint

ErrorClass = Literal["http_error", "timeout", "stream_cut", "malformed_stream", "connection", "cancelled",
                     "context_length"]

_ROW = "row"  # a field's metadata key: when to_row() writes it (absent: always)
_IF_SET = "if_set"  # only when not None
_MODEL_CLOCK = "model_clock"  # only when the figures come from the sim's model clock (clock == "sim_model")
_NEVER = "never"  # the client's own use (its self-check), not the trials row


def _only(when: str) -> Any:
    return field(default=None, metadata={_ROW: when})


@dataclass(frozen=True)
class RequestResult:
    """One request as the client measured it (seconds on the model's clock unless a name says `wall`)."""

    # --- what the stream showed (measure_request); `ok` is derived: no error
    error: str | None
    error_class: ErrorClass | None
    endpoint: Endpoint
    prompt_tokens: int  # the server's count, else the ids sent; the load loop falls back on the plan's
    token_count_source: Literal["meta_info", "chunks", "usage"]
    chunk_times_s: list[float]  # every token-carrying chunk's arrival, wall seconds since the send
    chunk_tokens: list[int]  # tokens per chunk (a speculative step carries several)
    time_scale: float  # model seconds per wall second (the sim's speed-up; 1 for real servers)
    sent_at: str  # ISO 8601, UTC
    start_s: float | None  # the send, model seconds after the launch's workload began
    server_request_id: Any
    sim_max_lag_s: float | None  # the sim's own lag figures (None from other servers)
    sim_first_lag_s: float | None
    sim_last_lag_s: float | None
    # --- the figures (stream.clock_figures), on the sim's model clock where it stamps every event
    completion_tokens: int
    e2e_s: float
    ttft_s: float | None
    tpot_s: float | None
    decode_tok_s: float | None
    output_tok_s: float | None
    accept_length: float | None
    clock: Literal["wall", "sim_model"]
    chunk_model_times_s: list[float] | None = _only(_MODEL_CLOCK)
    chunk_model_tokens: list[int] | None = _only(_MODEL_CLOCK)
    wall_ttft_s: float | None = _only(_MODEL_CLOCK)  # the same figures on the wall clock x time_scale
    wall_tpot_s: float | None = _only(_MODEL_CLOCK)
    wall_e2e_s: float | None = _only(_MODEL_CLOCK)
    wall_decode_tok_s: float | None = _only(_MODEL_CLOCK)
    wall_output_tok_s: float | None = _only(_MODEL_CLOCK)
    decode_tokens: int | None = _only(_IF_SET)  # tokens after the first chunk (core.metrics.decode), same clock
    decode_s: float | None = _only(_IF_SET)  # first to last token-carrying chunk, same clock
    decode_unmeasured: DecodeUnmeasured | None = _only(_IF_SET)  # why there is no decode figure (an ok request's)
    sim_mean_batch: float | None = _only(_IF_SET)
    sim_arrival_model_s: float | None = _only(_IF_SET)
    # --- the plan's side (the load loop)
    scheduled_s: float | None = _only(_IF_SET)  # open loop: the scheduled send
    send_lateness_wall_s: float | None = _only(_IF_SET)  # open loop: actual minus scheduled send
    phase: Literal["warmup", "measured", "cooldown"] | None = _only(_IF_SET)
    planned_prompt_tokens: int | None = _only(_IF_SET)
    planned_output_tokens: int | None = _only(_IF_SET)
    model_start_s: float | None = _only(_IF_SET)  # the send on the sim's model clock (loops._model_start)
    dataset_row: int | None = _only(_IF_SET)
    # --- the client's self-check (selfcheck.py), never in the row: SSE events per token-carrying chunk
    read_events: list[int] | None = _only(_NEVER)

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_row(self) -> dict[str, Any]:
        """The dict `on_row` receives and trials.jsonl keeps: `ok`, then the fields in order, each as its rule says."""
        row: dict[str, Any] = {"ok": self.ok}
        model_clock = self.clock == "sim_model"
        for f in fields(self):
            value = getattr(self, f.name)
            when = f.metadata.get(_ROW)
            if (when == _NEVER or (when == _IF_SET and value is None)
                    or (when == _MODEL_CLOCK and not model_clock)):
                continue
            row[f.name] = value
        return row
