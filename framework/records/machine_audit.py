"""Audit the machine a launch says it ran on: its row's `machine` field against the rest of the trials.

Under rules version 4 a verdict covers the machines the hardware says (framework.core.machine.hardware_of),
so a forged host, CPU or GPU in a launch row could make one machine look like a fleet (issue 31). A
launch row's `machine` is written from the same facts the trials file keeps elsewhere: the `environment`
row in force when the launch ran (host, CPU, label and the host's GPUs) and, for a server that names its
devices, `server_info.hardware.gpus`. `problems` holds each launch to them as `provenance` holds the
record to its backend: its id must be the id of its own fields, its host, CPU and label those of its
environment row, its GPUs the server's (or the host's), and the server's GPUs must be the host's. A launch
a resume copied in (`reused_from`) ran under its source's environment row, so it is held to its source's
trials file where that is still found, and must be the row found there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from framework.core import machine as machine_mod
from framework.core.trials import Trials
from framework.records.trials import read_trials


def _uuids(gpus: Any) -> list[str]:
    return sorted(str(g.get("uuid")) for g in gpus or [] if isinstance(g, dict) and g.get("uuid"))


def launch_problems(row: dict[str, Any], env: dict[str, Any] | None) -> list[str]:
    """What is wrong with one launch row's `machine` field, given the environment row in force (or None)."""
    own = row.get("machine")
    if not isinstance(own, dict):
        return []  # a row from before launch rows named their machine (0.2): named by its environment row
    lid = row.get("launch_id")
    out: list[str] = []
    expect = machine_mod.identity(own.get("host"), own.get("cpu"), own.get("gpus") or [], own.get("label"))["id"]
    if own.get("id") != expect:
        out.append(f"launch {lid}'s machine id {own.get('id')!r} is not the id of its own host, CPU, GPUs and "
                   f"label ({expect!r}): the row was edited")
    used = _uuids(machine_mod.server_gpus(row.get("server_info")))
    if used and _uuids(own.get("gpus")) != used:
        out.append(f"launch {lid}'s machine names GPUs {_uuids(own.get('gpus'))}, but its server reported "
                   f"running on {used}")
    if env is None or "cpu" not in env:  # no environment row of this format to hold it to
        return out
    for key in ("host", "cpu", "label"):
        if own.get(key) != env.get(key):
            out.append(f"launch {lid}'s machine says {key} {own.get(key)!r}, but the environment row it ran "
                       f"under says {env.get(key)!r}")
    host_gpus = _uuids(env.get("gpus"))
    if not used and _uuids(own.get("gpus")) != host_gpus:
        out.append(f"launch {lid}'s machine names GPUs {_uuids(own.get('gpus'))}, but the environment row it "
                   f"ran under says the host has {host_gpus}")
    if used and not set(used) <= set(host_gpus):
        out.append(f"launch {lid}'s server reported GPUs {used}, which the host it ran on (environment row: "
                   f"{host_gpus}) does not have")
    return out


def problems(rows: list[dict[str, Any]], source: Callable[[str], Path | None]) -> list[str]:
    """Every launch row's machine problems (`launch_problems`), a resume's copies held to their source file
    (`source(run_dir)`: its trials.jsonl, or None where it is gone)."""
    out: list[str] = []
    sources: dict[str, list[dict[str, Any]] | None] = {}
    for row, env in Trials.of(rows).launches_in_environment():
        origin = row.get("reused_from")
        if not origin:
            out += launch_problems(row, env)
            continue
        if origin not in sources:
            path = source(str(Path(str(origin)) / "trials.jsonl"))
            sources[origin] = read_trials(path) if path is not None else None
        found = sources[origin]
        if found is None:
            out += launch_problems(row, None)  # its source is gone: held to its own fields and server
            continue
        there = {str(r.get("launch_id")): (r, e) for r, e in Trials.of(found).launches_in_environment()}
        match = there.get(str(row.get("launch_id")))
        if match is None or match[0].get("machine") != row.get("machine"):
            out.append(f"launch {row.get('launch_id')} was copied from {origin}, whose trials file "
                       + ("has no such launch" if match is None else
                          f"says it ran on machine {(match[0].get('machine') or {}).get('id')!r}, not "
                          f"{(row.get('machine') or {}).get('id')!r}"))
            continue
        out += launch_problems(*match)
    return out
