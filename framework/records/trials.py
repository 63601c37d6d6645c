"""The trials file on disk: read it back (a cut last line dropped, damage elsewhere named by line), and the
summaries of a run's rows that its record keeps. The row models and the typed read side are
:mod:`framework.core.trials`."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from framework.core.trials import (  # noqa: F401  (re-exported: the models live in core)
    FORMAT,
    LaunchEndRow,
    LaunchRow,
    RequestRow,
    Trials,
    WorkloadRow,
    parse_trials,
)
from framework.errors import TrialsFileError


def read_trials(path: str | Path) -> list[dict]:
    """The rows of a trials file. A cut last line (a crash mid-write) is dropped; damage elsewhere raises."""
    try:
        data = Path(path).read_bytes()
    except IsADirectoryError:
        raise TrialsFileError(f"{path} is a directory, not a trials file") from None
    except OSError as exc:
        raise TrialsFileError(f"{path}: cannot read: {exc.strerror}") from None
    return parse_trials(data, path)


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
    return {r["launch_id"]: {k: v for k, v in r.items() if k not in ("kind", "launch_id", "levels", "format")}
            for r in Trials(rows).of_kind("workload")}


def client_bottlenecks(rows: list[dict[str, Any]]) -> list[str]:
    """Launches whose client reported that it could not keep up (framework.execution.client.client_health)."""
    return [w["launch_id"] for w in Trials(rows).of_kind("workload") if (w.get("client") or {}).get("bottleneck")]


def late_client_reason(rows: list[dict[str, Any]]) -> str:
    """Why the first client that could not keep up says it could not (empty when none)."""
    for w in Trials(rows).of_kind("workload"):
        if (w.get("client") or {}).get("bottleneck"):
            return "; ".join(w["client"].get("reasons") or [])
    return ""


def release_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """How long launches waited for the previous server's group, port and GPU memory to be released."""
    waits = [r["release"] for r in Trials.of(rows).of_kinds("launch", "launch_end") if r.get("release")]
    if not waits:
        return {"launches": 0}
    times = [w["waited_s"] for w in waits]
    held = [w for w in waits if not (w["group_gone"] and w["port_free"] and w["gpu_released"] is not False)]
    return {"launches": len(waits), "total_waited_s": round(sum(times), 3), "max_waited_s": round(max(times), 3),
            "median_waited_s": round(statistics.median(times), 4), "not_released_in_time": len(held),
            "gpu_checked": any(w["gpu_released"] is not None for w in waits)}
