"""The raw data of a run: one JSON line per launch outcome, one per request and one per finished
workload (what was sent, as resolved), written as they happen.

These rows are the only input the analysis needs, so anyone holding a trials file (and the
hypothesis it was run for) can recompute every verdict. Times are seconds on the model's clock:
for the simulated backend run faster than real time (`time_scale` > 1) the client has already
multiplied wall durations by the scale, and keeps the scale on every row.
"""

from __future__ import annotations

from framework.errors import TrialsFileError  # noqa: F401  (one hierarchy: framework.errors)

import json
import statistics
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict


class _Row(BaseModel):
    model_config = ConfigDict(extra="allow")


class LaunchRow(_Row):
    """One server launch (the unit of replication): did it start, and if not, why."""

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
    failure_class: str | None = None  # framework.execution.failures.FAILURE_CLASSES
    failure_line: str | None = None
    log_tail: list[str] = []
    release: dict | None = None  # after a failed start: how long the group, port and GPU memory took to free
    startup_s: float | None = None
    argv: list[str] = []
    server_info: dict | None = None
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
    ok: bool = True  # False: it crashed while being measured
    exit_code: int | None = None
    crashed: bool = False  # exited on its own after it was ready (failure_class crash_after_ready)
    failure_class: str | None = None
    failure_line: str | None = None
    error: str | None = None
    release: dict | None = None
    server_metrics: dict | None = None  # its own Prometheus counters before the stop (framework.execution.prometheus)
    finished: str


class RequestRow(_Row):
    """One request measured by the client. Failed requests are kept, with the reason."""

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




def read_trials(path: str | Path) -> list[dict]:
    """The rows of a trials file. A cut last line (a crash mid-write) is dropped; damage elsewhere raises."""
    try:
        data = Path(path).read_bytes()
    except IsADirectoryError:
        raise TrialsFileError(f"{path} is a directory, not a trials file") from None
    except OSError as exc:
        raise TrialsFileError(f"{path}: cannot read: {exc.strerror}") from None
    return parse_trials(data, path)


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


def read_json_object(path: str | Path) -> dict | None:
    """A JSON object from a file, or None when it is missing, unreadable or not an object."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


# --------------------------------------------------------------------------- summaries of a run's rows


def workload_records(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per launch, the workload as resolved (seed, schedule hash, dataset sha256 and rows) and the client's health."""
    out: dict[str, Any] = {}
    for r in rows:
        if r.get("kind") == "workload":
            keep = {k: v for k, v in r.items() if k not in ("kind", "launch_id", "levels")}
            out[r["launch_id"]] = keep
    return out


def client_bottlenecks(rows: list[dict[str, Any]]) -> list[str]:
    """Launches whose client reported that it could not keep up (framework.execution.client.client_health)."""
    return [r["launch_id"] for r in rows if r.get("kind") == "workload" and (r.get("client") or {}).get("bottleneck")]


def late_client_reason(rows: list[dict[str, Any]]) -> str:
    """Why the first client that could not keep up says it could not (empty when none)."""
    for r in rows:
        if r.get("kind") == "workload" and (r.get("client") or {}).get("bottleneck"):
            return "; ".join(r["client"].get("reasons") or [])
    return ""


def release_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """How long launches waited for the previous server's group, port and GPU memory to be released."""
    waits = [r["release"] for r in rows if r.get("kind") in ("launch", "launch_end") and r.get("release")]
    if not waits:
        return {"launches": 0}
    times = [w["waited_s"] for w in waits]
    held = [w for w in waits if not (w["group_gone"] and w["port_free"] and w["gpu_released"] is not False)]
    return {"launches": len(waits), "total_waited_s": round(sum(times), 3), "max_waited_s": round(max(times), 3),
            "median_waited_s": round(statistics.median(times), 4), "not_released_in_time": len(held),
            "gpu_checked": any(w["gpu_released"] is not None for w in waits)}
