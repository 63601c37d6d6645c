"""Workloads: what the client sends and when, as pure data and pure functions.

A workload is declared in the DSL (an experiment's `workload:` and a factor level's `workload:`)
and resolved, per launch, into a :class:`Plan`: one :class:`PlannedRequest` per request with its
prompt, its output length, its phase (warm-up, measured, cool-down) and, for an open loop, its
scheduled send time. The client (`framework.execution.client`) executes a plan; it makes no
choice of its own. Everything random is drawn from the launch seed, so a plan is reproducible
from the record (which keeps the seed, the schedule's hash and the dataset's sha256 and rows).

Two ways to load a server, as serving benchmarks do:

- closed loop (`concurrency: C`): C streams, each sending its next request the moment the last one
  ends. Warm-up requests are the loop's first ones (at least C when C > 1, so the burst of the first
  round is never measured); then the measured requests; then cool-down requests that keep C in
  flight until the last measured request has ended (they are cancelled then, and never analysed).
- open loop (`request_rate: R`): arrivals at a seeded Poisson (burstiness 1) or gamma schedule of
  mean rate R (model requests per second), optionally capped at `max_concurrency` in flight; the run
  length is the design's `requests` or `duration_s` of model time.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any, Literal, Union

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

Endpoint = Literal["generate", "completions", "chat"]
ENDPOINT_PATHS = {"generate": "/generate", "completions": "/v1/completions", "chat": "/v1/chat/completions"}
PROMPT_TOKEN_RANGE = (1000, 30000)  # ordinary vocabulary ids for any modern tokenizer
# Short, common English words: one token each (with the leading space) in the usual BPE vocabularies,
# and one token each in the simulator's tokenizer stand-in (word pieces of up to 4 characters).
TEXT_WORDS = (
    "the of and to in is that for it as was with be by on not he this are or his from at but have an had "
    "they you were her she one all we has when if so no will more can who out up what said them its than "
    "been some time into only two new like then now any also very just over such most made even well back "
    "way many much down did each old life work day part long own good same year high last city area far"
).split()


# Bounds that keep an input within the schema from exhausting memory or running unbounded (issue 21).
MAX_TIMEOUT_S = 86_400.0  # a request's timeout: at most a day, never infinite
MAX_PLANNED_REQUESTS = 1_000_000  # requests in one launch's plan (an open loop's duration_s x request_rate too)
MAX_IN_FLIGHT_TOKENS = 1 << 23  # longest prompt x streams (concurrency, or an open loop's max_concurrency)
MAX_PLAN_TOKENS = 1 << 25  # prompt tokens of one launch's whole plan (held in memory before the first request)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# --------------------------------------------------------------------------- the DSL


class Uniform(_Strict):
    """Lengths drawn uniformly from [low, high] (integers, both ends included)."""

    dist: Literal["uniform"]
    low: int = Field(ge=1, le=1_000_000)
    high: int = Field(ge=1, le=1_000_000)

    @model_validator(mode="after")
    def _ordered(self) -> "Uniform":
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) must be >= low ({self.low})")
        return self


class Normal(_Strict):
    """Lengths drawn from a normal distribution, rounded, and raised to `min` where they fall below."""

    dist: Literal["normal"]
    mean: float = Field(gt=0, le=1_000_000)
    sd: float = Field(ge=0, le=1_000_000)
    min: int = Field(1, ge=1, le=1_000_000)


Length = Union[int, Uniform, Normal]


class Dataset(_Strict):
    """Prompts (and output lengths) from a file, sampled by the launch seed.

    `format`: `sharegpt` (a JSON list or JSONL of {conversations: [{from|role, value|content}, ...]};
    the first human turn is the prompt, the next model turn's length the output length), `jsonl`
    (rows of {prompt, output_len}), or `auto` (by content). `output_tokens` of the workload overrides
    the dataset's output lengths when `use_output_len` is false.
    """

    path: str
    format: Literal["auto", "sharegpt", "jsonl"] = "auto"
    use_output_len: bool = True
    max_output_tokens: int = Field(4096, ge=2, le=1_000_000)
    # the file's registered sha256 (64 hex digits): a file that differs is refused before anything starts
    sha256: str | None = Field(None, pattern="^[0-9a-f]{64}$")


class SharedPrefix(_Strict):
    """`groups` system prompts of `prefix_tokens` each; every request starts with its group's prefix."""

    groups: int = Field(ge=1, le=100_000)
    prefix_tokens: int = Field(ge=1, le=1_000_000)


class Workload(_Strict):
    """What the client sends: the seed's single-stream, fixed-length, greedy measurement by default."""

    endpoint: Endpoint | None = None  # None: the backend's own protocol (SGLang: generate; OpenAI: completions)
    prompt_tokens: Length = 128
    output_tokens: Length = 256
    prompt: Literal["ids", "text"] = "ids"
    dataset: Dataset | None = None
    shared_prefix: SharedPrefix | None = None
    concurrency: int = Field(1, ge=1, le=4096)
    request_rate: float | None = Field(None, gt=0, le=100_000)
    burstiness: float = Field(1.0, gt=0, le=100)
    max_concurrency: int | None = Field(None, ge=1, le=4096)
    duration_s: float | None = Field(None, gt=0, le=86_400)
    temperature: float = Field(0.0, ge=0.0, le=10.0)
    ignore_eos: bool = True
    request_timeout_s: float = Field(600.0, gt=0, le=MAX_TIMEOUT_S)  # finite: a hung stream must end
    # Prompts, lengths and a dataset's picks drawn from this seed instead of each launch's, so every launch of
    # every condition sends the same prompts: what an `outputs` prediction pairs on (None: the launch's seed).
    prompt_seed: int | None = Field(None, ge=0, lt=2**32)
    # Keep each request's generated tokens (at most its output_tokens; framework.execution.client.capture). The
    # run turns it on for the conditions an `outputs` prediction compares.
    keep_outputs: bool = False

    @model_validator(mode="after")
    def _consistent(self) -> "Workload":
        if isinstance(self.output_tokens, int) and self.output_tokens < 2:
            raise ValueError("output_tokens must be >= 2 (a decode rate needs two tokens)")
        if isinstance(self.prompt_tokens, int) and not 1 <= self.prompt_tokens <= 1_000_000:
            raise ValueError("prompt_tokens must be in [1, 1000000]")
        if self.request_rate is None:
            for name in ("max_concurrency", "duration_s"):
                if getattr(self, name) is not None:
                    raise ValueError(f"{name} applies to an open loop only: set request_rate too")
            if self.burstiness != 1.0:
                raise ValueError("burstiness applies to an open loop only: set request_rate too")
        elif self.concurrency != 1:
            raise ValueError("concurrency is the closed loop's; with request_rate use max_concurrency")
        if self.endpoint == "chat" and self.prompt == "ids":
            if self.dataset is None:
                raise ValueError("the chat endpoint takes text: set prompt: text")
        if self.dataset is not None and self.shared_prefix is not None:
            raise ValueError("dataset and shared_prefix cannot be combined")
        return self

    @property
    def open_loop(self) -> bool:
        return self.request_rate is not None


def endpoint_of(workload: Workload, protocol: str = "sglang") -> Endpoint:
    """The endpoint a workload uses against a backend that speaks `protocol` (sglang or openai)."""
    if workload.endpoint is not None:
        return workload.endpoint
    return "generate" if protocol == "sglang" else "completions"


# --------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class PlannedRequest:
    index: int
    phase: Literal["warmup", "measured", "cooldown"]
    prompt: list[int] | str
    prompt_tokens: int  # as planned (the server's count is recorded beside it)
    output_tokens: int
    send_at_s: float | None = None  # open loop: model seconds after the start of the run
    dataset_row: int | None = None


@dataclass(frozen=True)
class DatasetRow:
    prompt: str
    output_len: int | None


@dataclass
class Plan:
    mode: Literal["closed", "open"]
    concurrency: int | None  # closed loop: streams; open loop: max in flight (None: unbounded)
    requests: list[PlannedRequest]
    resolved: dict[str, Any] = field(default_factory=dict)  # what the record keeps

    @property
    def measured(self) -> int:
        return sum(1 for r in self.requests if r.phase == "measured")


def draw_lengths(spec: Length, n: int, rng: np.random.Generator) -> list[int]:
    if isinstance(spec, int):
        return [spec] * n
    if isinstance(spec, Uniform):
        return [int(x) for x in rng.integers(spec.low, spec.high + 1, size=n)]
    values = np.rint(rng.normal(spec.mean, spec.sd, size=n))
    return [max(spec.min, int(x)) for x in values]


def mean_length(spec: Length) -> int:
    """The typical length of a distribution (for planning from a model), rounded."""
    if isinstance(spec, int):
        return spec
    if isinstance(spec, Uniform):
        return round((spec.low + spec.high) / 2)
    return max(spec.min, round(spec.mean))


def max_length(spec: Length) -> int:
    """The longest length a distribution plausibly draws (a normal's mean + 6 sd), for the size bounds."""
    if isinstance(spec, int):
        return spec
    if isinstance(spec, Uniform):
        return spec.high
    return max(spec.min, math.ceil(spec.mean + 6 * spec.sd))


def planned_requests(workload: Workload, requests_n: int, warmup: int) -> int:
    """How many requests one launch's plan holds (an open loop over `duration_s`: its expected arrivals)."""
    n_warm, n_meas = total_requests(workload, requests_n, warmup)
    if workload.open_loop and workload.duration_s is not None:
        n_meas = math.ceil(float(workload.request_rate) * workload.duration_s) + 1  # type: ignore[arg-type]
    n_cool = workload.concurrency - 1 if not workload.open_loop and workload.concurrency > 1 else 0
    return n_warm + n_meas + n_cool


def size_problem(workload: Workload, requests_n: int, warmup: int) -> str | None:
    """Why one launch of `workload` would not fit in memory (the plan is built before the first request), or None.

    A dataset's prompts are bounded by its file's size cap (framework.execution.client.plan) instead of here.
    """
    n = planned_requests(workload, requests_n, warmup)
    if n > MAX_PLANNED_REQUESTS:
        what = ("request_rate x duration_s" if workload.open_loop and workload.duration_s is not None
                else "the design's requests")
        return f"{what} plans {n:,} requests per launch; at most {MAX_PLANNED_REQUESTS:,}"
    if workload.dataset is not None:
        return None
    prefix = workload.shared_prefix.prefix_tokens if workload.shared_prefix else 0
    longest = max_length(workload.prompt_tokens) + prefix
    streams = workload.max_concurrency if workload.open_loop else workload.concurrency
    if streams is not None and longest * streams > MAX_IN_FLIGHT_TOKENS:
        name = "max_concurrency" if workload.open_loop else "concurrency"
        return (f"prompt_tokens x {name} is {longest:,} x {streams:,} = {longest * streams:,} tokens in flight; "
                f"at most {MAX_IN_FLIGHT_TOKENS:,}")
    if longest * n > MAX_PLAN_TOKENS:
        return (f"{n:,} requests of up to {longest:,} prompt tokens are {longest * n:,} tokens per launch; "
                f"at most {MAX_PLAN_TOKENS:,} (fewer requests, or shorter prompts)")
    return None


def token_prompt(rng: np.random.Generator, length: int) -> list[int]:
    return [int(x) for x in rng.integers(*PROMPT_TOKEN_RANGE, size=length)]


def text_prompt(rng: np.random.Generator, length: int) -> str:
    """About `length` tokens of text: one common short word per token."""
    words = rng.integers(0, len(TEXT_WORDS), size=length)
    return " ".join(TEXT_WORDS[int(i)] for i in words)


def arrival_times(n: int, rate: float, burstiness: float, rng: np.random.Generator) -> list[float]:
    """Send times (model seconds from the start) of `n` arrivals at mean rate `rate`.

    Gaps are gamma(shape=burstiness, scale=1/(rate*burstiness)) as in SGLang's and vLLM's serving
    benchmarks: burstiness 1 is a Poisson process, below 1 burstier, above 1 more regular. The
    first request is sent at 0.
    """
    if n <= 0:
        return []
    gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=n - 1)
    return [0.0, *np.cumsum(gaps).tolist()]


def schedule_hash(times: list[float | None]) -> str:
    """sha256 of the schedule at microsecond resolution (what the record keeps of it)."""
    text = ",".join("-" if t is None else f"{t:.6f}" for t in times)
    return hashlib.sha256(text.encode()).hexdigest()


def parse_dataset(text: str, fmt: str = "auto", max_rows: int | None = None) -> list[DatasetRow]:
    """Rows of a ShareGPT (JSON list or JSONL) or {prompt, output_len} JSONL file, at most `max_rows` of them.

    Raises ValueError."""
    stripped = text.lstrip()
    if stripped.startswith("["):
        items = json.loads(text)
    else:
        items = []
        for number, line in enumerate(text.splitlines(), start=1):
            if max_rows is not None and len(items) > max_rows:
                break
            if line.strip():
                try:
                    items.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise ValueError(f"line {number} is not JSON: {exc.msg}") from None
    if not isinstance(items, list):
        raise ValueError("expected a JSON list or JSON lines")
    if max_rows is not None and len(items) > max_rows:
        raise ValueError(f"more than {max_rows:,} rows; a dataset may have at most {max_rows:,}")
    rows: list[DatasetRow] = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise ValueError(f"row {i} is not an object")
        kind = fmt
        if kind == "auto":
            kind = "sharegpt" if "conversations" in item or "conversation" in item else "jsonl"
        if kind == "sharegpt":
            turns = item.get("conversations", item.get("conversation"))
            if not isinstance(turns, list):
                raise ValueError(f"row {i}: no conversations list")
            prompt, answer = _first_exchange(turns)
            if prompt is None:
                continue  # a conversation without a human turn (bench_serving skips them too)
            rows.append(DatasetRow(prompt, None if answer is None else max(2, approx_tokens(answer))))
        else:
            if not isinstance(item.get("prompt"), str):
                raise ValueError(f"row {i}: needs a string 'prompt'")
            out = item.get("output_len")
            if out is not None and (not isinstance(out, int) or out < 1):
                raise ValueError(f"row {i}: output_len must be a positive integer")
            rows.append(DatasetRow(item["prompt"], out))
    if not rows:
        raise ValueError("no usable rows")
    return rows


def _first_exchange(turns: list[Any]) -> tuple[str | None, str | None]:
    prompt = None
    for turn in turns:
        if not isinstance(turn, dict):
            continue
        who = str(turn.get("from", turn.get("role", ""))).lower()
        text = turn.get("value", turn.get("content"))
        if not isinstance(text, str):
            continue
        if prompt is None and who in ("human", "user"):
            prompt = text
        elif prompt is not None and who in ("gpt", "assistant", "model", "chatgpt", "bard"):
            return prompt, text
    return prompt, None


def approx_tokens(text: str) -> int:
    """A tokenizer-free length: about one token per 4 characters of a word (the sim counts the same)."""
    return max(1, sum(max(1, math.ceil(len(w) / 4)) for w in text.split()))


def total_requests(workload: Workload, requests_n: int, warmup: int) -> tuple[int, int]:
    """(warm-up, measured) request counts of a closed loop or a request-counted open loop.

    A closed loop measures at least one full round of `concurrency` and warms up with at least one
    (its first round starts at once, in one batched prefill: never steady state).
    """
    if workload.open_loop:
        return warmup, requests_n
    c = workload.concurrency
    return (max(warmup, c) if c > 1 else warmup), max(requests_n, c)


_NEW_DEFAULTS = {"prompt_seed": None, "keep_outputs": False}  # left out of the record at their defaults


def _dump(workload: Workload) -> dict[str, Any]:
    """The workload as the record keeps it; fields added in 0.3.0 only when set, so older records read alike."""
    out = workload.model_dump(mode="json")
    for key, default in _NEW_DEFAULTS.items():
        if out.get(key) == default:
            out.pop(key, None)
    if out.get("dataset") and out["dataset"].get("sha256") is None:
        out["dataset"].pop("sha256", None)
    return out


def make_plan(workload: Workload, *, requests_n: int, warmup: int, seed: int,
              dataset: list[DatasetRow] | None = None, dataset_info: dict[str, Any] | None = None) -> Plan:
    """The launch's requests, drawn from `seed` (the launch seed). Pure."""
    content = seed if workload.prompt_seed is None else workload.prompt_seed  # what is sent; the schedule: `seed`
    rng = np.random.default_rng([content, 0x5EED])
    n_warm, n_meas = total_requests(workload, requests_n, warmup)
    times: list[float] | None = None
    if workload.open_loop:
        rate = float(workload.request_rate)  # type: ignore[arg-type]
        if workload.duration_s is not None:
            # warm-ups first, then every arrival within duration_s of the first measured one
            t = arrival_times(n_warm + 1, rate, workload.burstiness, np.random.default_rng([seed, 0xA77]))
            times = list(t[:n_warm])
            start = t[n_warm]
            gap_rng = np.random.default_rng([seed, 0xA78])
            measured_times = [start]
            while True:
                gap = float(gap_rng.gamma(workload.burstiness, 1.0 / (rate * workload.burstiness)))
                if (measured_times[-1] + gap - start > workload.duration_s
                        or len(measured_times) >= MAX_PLANNED_REQUESTS):
                    break
                measured_times.append(measured_times[-1] + gap)
            times += measured_times
            n_meas = len(measured_times)
        else:
            times = arrival_times(n_warm + n_meas, rate, workload.burstiness, np.random.default_rng([seed, 0xA77]))
    n_cool = workload.concurrency - 1 if not workload.open_loop and workload.concurrency > 1 else 0
    total = n_warm + n_meas + n_cool
    phases = ["warmup"] * n_warm + ["measured"] * n_meas + ["cooldown"] * n_cool
    out_lens = draw_lengths(workload.output_tokens, total, rng)
    requests: list[PlannedRequest] = []
    resolved: dict[str, Any] = {
        "mode": "open" if workload.open_loop else "closed", "seed": seed, "warmup": n_warm, "measured": n_meas,
        "cooldown": n_cool, "workload": _dump(workload),
    }
    if dataset is not None:
        picks = [int(i) for i in np.random.default_rng([content, 0xDA7A]).integers(0, len(dataset), size=total)]
        for i, (phase, pick) in enumerate(zip(phases, picks, strict=False)):
            row = dataset[pick]
            out = out_lens[i]
            if workload.dataset and workload.dataset.use_output_len and row.output_len is not None:
                out = max(2, min(row.output_len, workload.dataset.max_output_tokens))
            requests.append(PlannedRequest(i, phase, row.prompt, approx_tokens(row.prompt), out,  # type: ignore[arg-type]
                                           times[i] if times else None, pick))
        resolved["dataset"] = {**(dataset_info or {}), "rows_available": len(dataset),
                               "rows_used": sorted(set(picks))}
    else:
        lengths = draw_lengths(workload.prompt_tokens, total, rng)
        prefixes: list[Any] = []
        if workload.shared_prefix is not None:
            sp = workload.shared_prefix
            prefix_rng = np.random.default_rng([content, 0x9F1])
            prefixes = [text_prompt(prefix_rng, sp.prefix_tokens) if workload.prompt == "text"
                        else token_prompt(prefix_rng, sp.prefix_tokens) for _ in range(sp.groups)]
            resolved["shared_prefix"] = {"groups": sp.groups, "prefix_tokens": sp.prefix_tokens}
        for i, (phase, length) in enumerate(zip(phases, lengths, strict=False)):
            req_rng = np.random.default_rng([content, i])
            prompt: list[int] | str
            if workload.prompt == "text":
                prompt = text_prompt(req_rng, length)
                if prefixes:
                    prompt = prefixes[i % len(prefixes)] + " " + prompt
            else:
                prompt = token_prompt(req_rng, length)
                if prefixes:
                    prompt = prefixes[i % len(prefixes)] + prompt
            planned = length + (workload.shared_prefix.prefix_tokens if prefixes else 0)  # type: ignore[union-attr]
            requests.append(PlannedRequest(i, phase, prompt, planned, out_lens[i],  # type: ignore[arg-type]
                                           times[i] if times else None))
    if times is not None:
        resolved["schedule_sha256"] = schedule_hash(times)
        resolved["schedule_span_s"] = times[-1] if times else 0.0
    return Plan("open" if workload.open_loop else "closed",
                workload.max_concurrency if workload.open_loop else workload.concurrency, requests, resolved)
