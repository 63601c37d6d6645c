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
(where it ran) before its first launch; files without one read as before.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Literal

from pydantic import BaseModel, ConfigDict

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
    finished: str


class RequestRow(_Row):
    """One request measured by the client. Failed requests are kept, with the reason.

    Beside these fields a request row carries `decode_tokens` and `decode_s` (the tokens after the
    first chunk and the time from the first chunk to the last) where decode was measured, and
    `decode_unmeasured` (framework.core.vocabulary.DecodeUnmeasured) where an ok request's was not.
    """

    kind: Literal["request"] = "request"
    trial_id: str
    launch_id: str
    condition: int
    levels: dict[str, str]
    index: int
    warmup: bool
    ok: bool
    error: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None
    decode_tok_s: float | None = None
    output_tok_s: float | None = None
    accept_length: float | None = None
    chunk_times_s: list[float] = []
    chunk_tokens: list[int] = []
    time_scale: float = 1.0
    sent_at: str | None = None
    phase: Literal["warmup", "measured", "cooldown"] | None = None  # `warmup` is true for warm-up and cool-down
    endpoint: str | None = None
    start_s: float | None = None  # send time, model seconds since the launch's workload began
    scheduled_s: float | None = None  # open loop: the scheduled send time, same clock
    send_lateness_wall_s: float | None = None  # open loop: actual minus scheduled send, wall seconds


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

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return self._by_kind.get(kind, [])

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
