"""The raw data of a run, as rows: one per launch outcome, one per launch end, one per request and one per
finished workload (what was sent, as resolved), written as they happen, and read back by kind,
condition and launch.

These rows are the only input the analysis needs, so anyone holding a trials file (and the
hypothesis it was run for) can recompute every verdict. Times are seconds on the model's clock:
for the simulated backend run faster than real time (`time_scale` > 1) the client has already
multiplied wall durations by the scale, and keeps the scale on every row.

Format versions (CHANGELOG.md): 1, rows without a `format` key (before 0.2); 2, every row says
`"format": 2` and a request row leaves out the simulator's `sim_*` fields when the server sent none.
Both read the same way: a missing field is None. Since 0.2 a run also writes one `environment` row
(where it ran) before its first launch; files without one read as before. Since 0.3 launch and launch end
rows name the `definition` they were measured under (framework.core.definition); format 2 still, as a row
without one reads as a launch of unknown definition (what `resume=` and `audit` must then prove otherwise).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Literal, Union

from pydantic import BaseModel, ConfigDict, Field

from framework.core.vocabulary import DecodeUnmeasured, RequestErrorClass
from framework.errors import TrialsFileError

FORMAT = 2  # the trials format this code writes


class _Row(BaseModel):
    model_config = ConfigDict(extra="allow")

    format: int = 1  # the trials format a row was written in; rows from before it existed are format 1

    def to_json(self) -> dict[str, Any]:
        """The row as written: JSON types, and no simulator field the server did not send (a real server's
        request row has no `sim_*` keys at all)."""
        out = self.model_dump(mode="json")
        return {k: v for k, v in out.items() if not (v is None and k.startswith("sim_"))}


class LaunchRow(_Row):
    """One server launch (the unit of replication): did it start, and if not, why.

    A launch that started also says how many client worker processes measured it (`client_workers`, an extra
    key since 0.3; framework.execution.client.workers)."""

    kind: Literal["launch"] = "launch"
    launch_id: str
    condition: int
    levels: dict[str, str]
    replicate: int
    block: int
    attempt: int = 1
    seed: int
    ok: bool
    exit_code: int | None = None
    reachable: bool | None = None  # False: an endpoint that never answered (no evidence, framework.core.evidence)
    error: str | None = None  # "<failure class>: <the log line that shows it> (exit code N)"
    failure_class: str | None = None  # framework.core.vocabulary.FAILURE_CLASSES
    failure_line: str | None = None
    log_tail: list[str] = []
    release: dict | None = None  # after a failed start: how long the group, port and GPU memory took to free
    startup_s: float | None = None
    argv: list[str] = []
    server_info: dict | None = None
    machine: dict | None = None  # the machine it ran on: {id, host, cpu, gpus: [{uuid, name}], label} (0.3)
    load: dict | None = None  # {load_1m, cores} when its server was ready: how busy the host was (0.3, issue 35)
    # what it was measured under: {hypothesis, experiment, design} SHA-256s (framework.core.definition; 0.3)
    definition: dict[str, str] | None = None
    started: str
    finished: str


class LaunchEndRow(_Row):
    """The end of a launch that started: its exit, a crash while measured, and the wait until the machine was free.

    `release.waited_s` is how long the next launch had to wait for this server's process group to be
    gone, its port to be free and (with nvidia-smi) its GPU memory to be released.
    """

    kind: Literal["launch_end"] = "launch_end"
    launch_id: str
    condition: int
    levels: dict[str, str]
    ok: bool = True  # False: it did not serve its whole workload (crashed, or cut, dropped or stalled streams)
    exit_code: int | None = None
    crashed: bool = False  # exited on its own after it was ready (failure_class crash_after_ready)
    requests_lost: dict | None = None  # {request error class: n} of the lost requests that fail a launch
    failure_class: str | None = None
    failure_line: str | None = None
    error: str | None = None
    release: dict | None = None
    server_metrics: dict | None = None  # its own Prometheus counters before the stop (framework.execution.prometheus)
    definition: dict[str, str] | None = None  # as its launch row's (framework.core.definition; 0.3)
    finished: str


Number = Union[int, float]  # a figure as measured or as the server sent it: validation keeps an int an int

# when a request row's optional fields are written (every other field always is)
_IF_SET = frozenset({"decode_tokens", "decode_s", "decode_unmeasured", "sim_mean_batch", "sim_arrival_model_s",
                     "planned_prompt_tokens", "planned_output_tokens", "model_start_s", "dataset_row", "retries",
                     "output"})
_MODEL_CLOCK = frozenset({"chunk_model_times_s", "chunk_model_tokens", "wall_ttft_s", "wall_tpot_s", "wall_e2e_s",
                          "wall_decode_tok_s", "wall_output_tok_s"})  # only when clock == "sim_model"
_LAUNCH_STAMP = ("format", "kind", "trial_id", "launch_id", "condition", "levels", "index", "warmup")


class RequestRow(_Row):
    """One request: what the client measured (framework.execution.client.request.measure_request), completed by
    the load loop (the plan's side) and stamped by the launch (its identity), as trials.jsonl keeps it.
    Failed requests are kept, with the reason. Seconds are on the model's clock unless a name says `wall`.

    The one model of a request from the client to the analysis. The client holds it before the launch has
    stamped it (the identity fields None) and hands the launch `measured()`, the dict a worker process sends
    back; the launch validates that dict with its identity into this model again and writes `to_json()`.
    Fields that were always typed keep their coercion (an int time_scale is written 1.0); the others are
    typed so that validation leaves a value as measured (`Number`: an int a server sends stays an int), so a
    row's values are those the client has always written (tests/execution/test_request_result.py pins them).
    A field of `_IF_SET` is written only when set, one of `_MODEL_CLOCK` only on the sim's model clock, a
    `sim_*` field only when the server sent it, `read_events` (the client's self-check) never. Rows of older
    formats read alike: a missing field is None.
    """

    kind: Literal["request"] = "request"
    # --- the launch's stamp (None while the client holds the row)
    trial_id: str | None = None
    launch_id: str | None = None
    condition: int | None = None
    levels: dict[str, str] | None = None
    index: int | None = None
    warmup: bool | None = None  # true for warm-up and cool-down
    # --- what the stream showed; `ok`: no error
    ok: bool
    error: str | None = None
    prompt_tokens: int = 0  # the server's count, else the ids sent; the load loop falls back on the plan's
    completion_tokens: int = 0
    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None
    decode_tok_s: float | None = None
    output_tok_s: float | None = None
    accept_length: float | None = None
    chunk_times_s: list[float] = []  # every token-carrying chunk's arrival, wall seconds since the send
    chunk_tokens: list[int] = []  # tokens per chunk (a speculative step carries several)
    time_scale: float = 1.0  # model seconds per wall second (the sim's speed-up; 1 for real servers)
    sent_at: str | None = None  # ISO 8601, UTC
    phase: Literal["warmup", "measured", "cooldown"] | None = None
    endpoint: str | None = None
    start_s: float | None = None  # send time, model seconds since the launch's workload began
    scheduled_s: float | None = None  # open loop: the scheduled send time, same clock
    send_lateness_wall_s: float | None = None  # open loop: actual minus scheduled send, wall seconds
    error_class: RequestErrorClass | None = None
    token_count_source: Literal["meta_info", "chunks", "usage"] | None = None
    server_request_id: Any = None
    sim_max_lag_s: Number | None = None  # the sim's own lag figures (None from other servers)
    sim_first_lag_s: Number | None = None
    sim_last_lag_s: Number | None = None
    clock: Literal["wall", "sim_model"] | None = None
    # --- on the sim's model clock (framework.execution.client.stream.clock_figures): the wall figures beside
    chunk_model_times_s: list[Number] | None = None
    chunk_model_tokens: list[int] | None = None
    wall_ttft_s: Number | None = None  # the same figures on the wall clock x time_scale
    wall_tpot_s: Number | None = None
    wall_e2e_s: Number | None = None
    wall_decode_tok_s: Number | None = None
    wall_output_tok_s: Number | None = None
    # --- where measured: the decode's parts (what the launch's ratio estimate sums), same clock, else why not
    decode_tokens: int | None = None  # tokens after the first chunk (core.metrics.decode)
    decode_s: Number | None = None  # first to last token-carrying chunk
    decode_unmeasured: DecodeUnmeasured | None = None  # why an ok request has no decode figure
    # --- sent again on a fresh connection after its connection failed before any response byte
    #     (framework.execution.client.connection); written only when it was: rows without it had none
    retries: int | None = None
    # --- what it generated, for an outputs prediction (framework.execution.client.capture): written only when kept
    output: dict[str, Any] | None = None
    sim_mean_batch: Number | None = None
    sim_arrival_model_s: Number | None = None
    # --- the plan's side (the load loop)
    planned_prompt_tokens: int | None = None
    planned_output_tokens: int | None = None
    model_start_s: Number | None = None  # the send on the sim's model clock (client.loops._model_start)
    dataset_row: int | None = None
    # --- the client's self-check (client.selfcheck): SSE events per token-carrying chunk, never written
    read_events: list[int] | None = Field(default=None, exclude=True)
    read_waits: list[float | None] | None = Field(default=None, exclude=True)  # each chunk's bytes' wait (client.polls)

    def to_json(self) -> dict[str, Any]:
        model_clock = self.clock == "sim_model"
        return {k: v for k, v in super().to_json().items()
                if not ((k in _IF_SET and v is None) or (k in _MODEL_CLOCK and not model_clock))}

    def measured(self) -> dict[str, Any]:
        """The row as written, less the launch's stamp: what the client hands `on_row` (a worker, over its pipe)."""
        return {k: v for k, v in self.to_json().items() if k not in _LAUNCH_STAMP}

    def completed(self, **fields: Any) -> RequestRow:
        """This row with `fields` set, validated as a new row is."""
        return type(self).model_validate({**dict(self), **fields})


class WorkloadRow(_Row):
    """The end of one launch's workload: the workload as resolved and the client's own timing.

    `seed`, `schedule_sha256` (open loop) and `dataset` ({path, sha256, rows_used}) let anyone
    rebuild the exact requests (framework.core.workload.make_plan); `client` holds the send lateness,
    the event loop's lag and whether the client was the bottleneck.
    """

    kind: Literal["workload"] = "workload"
    launch_id: str
    condition: int
    levels: dict[str, str]
    ok: bool = True  # the workload ran to its end (every trials row has `ok`)
    mode: Literal["closed", "open"]
    seed: int
    endpoint: str
    warmup: int
    measured: int
    cooldown: int = 0
    schedule_sha256: str | None = None
    dataset: dict | None = None
    client: dict = {}


class EnvironmentRow(_Row):
    """Where a run (or a resume of it) launched its servers, written before its first launch: the host, the
    architecture and the GPUs the framework saw, and the backend it was told to start. It is hashed with the
    rest of the file, so `audit` can hold the record's `backend` and `environment` to it."""

    kind: Literal["environment"] = "environment"
    ok: bool = True  # every trials row has `ok`
    backend: str
    host: str | None = None
    machine: str | None = None
    gpu: dict | None = None
    cpu: str | None = None  # the CPU model (0.3)
    gpus: list[dict] | None = None  # [{uuid, name}] of every GPU the host sees (0.3)
    label: str | None = None  # `machine.label=`, or the SLURM node (0.3)
    machine_id: str | None = None  # framework.core.machine.machine_id of the above (0.3)
    written: str


ROW_MODELS: dict[str, type[_Row]] = {"launch": LaunchRow, "launch_end": LaunchEndRow, "request": RequestRow,
                                     "workload": WorkloadRow, "environment": EnvironmentRow}


def parse_trials(data: bytes, path: str | Path) -> list[dict]:
    """The rows of a trials file's bytes (`path` names it in errors): for a caller that already holds them."""
    lines = data.decode("utf-8", errors="replace").splitlines()
    last = max((n for n, line in enumerate(lines, start=1) if line.strip()), default=0)
    rows = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            if number == last:
                break
            raise TrialsFileError(f"{path}: line {number} is not valid JSON (the file was damaged or edited)") from None
        if not isinstance(row, dict):
            raise TrialsFileError(f"{path}: line {number} is not a trial row (a JSON object)")
        rows.append(row)
    return rows


class Trials:
    """A run's rows read back by kind, condition and launch.

    The rows stay the dicts that were written (the analysis reads them as such, so a recomputed verdict
    depends on nothing but the file, and rows of any format read alike); the typed accessors parse a kind
    into its model on demand, for rows this code wrote.
    """

    def __init__(self, rows: Iterable[dict[str, Any]]) -> None:
        self.rows = list(rows)
        self._by_kind = self._group("kind")

    def _group(self, key: str) -> dict[Any, list[dict[str, Any]]]:
        out: dict[Any, list[dict[str, Any]]] = {}
        for r in self.rows:
            out.setdefault(r.get(key), []).append(r)
        return out

    @classmethod
    def of(cls, rows: Trials | Iterable[dict[str, Any]]) -> Trials:
        """`rows` indexed (rows already indexed as they are)."""
        return rows if isinstance(rows, Trials) else cls(rows)

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        """The rows of `kind`, in file order."""
        return self._by_kind.get(kind, [])

    def of_kinds(self, *kinds: str) -> list[dict[str, Any]]:
        """The rows of any of `kinds`, in file order (where one kind's rows say what holds for the next's)."""
        return [r for r in self.rows if r.get("kind") in kinds]

    def launches_in_environment(self) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
        """Every launch row with the environment row in force when it was written (the last one before it: a
        resume on another machine writes its own), None before any."""
        env: dict[str, Any] | None = None
        out = []
        for r in self.of_kinds("environment", "launch"):
            if r.get("kind") == "launch":
                out.append((r, env))
            else:
                env = r
        return out

    @staticmethod
    def identity(row: dict[str, Any]) -> tuple[str, str] | None:
        """A launch's or a request's (kind, id): what two copies of one row share; None for other rows."""
        kind = row.get("kind")
        field = {"launch": "launch_id", "request": "trial_id"}.get(str(kind))
        if field is None or row.get(field) is None:
            return None
        return str(kind), str(row[field])

    def typed(self, kind: str) -> list[Any]:
        """The rows of `kind` parsed into their model (`ROW_MODELS`)."""
        return [ROW_MODELS[kind].model_validate(r) for r in self.of_kind(kind)]

    @property
    def launches(self) -> list[LaunchRow]:
        return self.typed("launch")

    @property
    def requests(self) -> list[RequestRow]:
        return self.typed("request")

    def by_launch(self) -> dict[str, list[dict[str, Any]]]:
        """Every row of each launch id, in file order."""
        return self._group("launch_id")

    def by_condition(self) -> dict[int, list[dict[str, Any]]]:
        return {int(c): rows for c, rows in self._group("condition").items() if c is not None}

    @property
    def formats(self) -> set[int]:
        """The trials formats the rows were written in (1 for rows from before formats existed)."""
        return {int(r.get("format", 1)) for r in self.rows}
