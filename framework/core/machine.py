"""The machine as a unit: what identifies the machine a launch ran on, and a stable id for it.

An effect measured on one machine need not carry to another of the same kind (issue 26: 5.65x on one
H200, 4.25x on the next), so every launch names its machine and the analysis can treat the machine as
a random effect (framework.analysis.machines). Pure functions over plain data.

The identity (`identity`) is the host name, the CPU model, the GPUs' UUIDs and names and an optional
label (the SLURM node, or one an operator gives). Lent GPU machines all call themselves `vm`, so a
GPU's UUID, which is unique to the device, is what tells them apart: when UUIDs are known they alone
make the id, whatever code wrote the row (`machine_id`). Trials files from before the `machine` field
(0.2) name the machine only in their `environment` row and, for the GPU server, in each launch's
`server_info.hardware.gpus`; `launch_machine` reads those in turn.

A label names a machine; it does not make one (issue 31: slots labelled `a` and `b` on one host were
counted as two machines). Under rules version 4 (`RuleSet.machine_by_hardware`) a launch's machine is
what its hardware says (`hardware_id`: the GPUs' UUIDs, else host and CPU model), so two labels over the
same host, CPU and GPUs are one machine, and the label is kept beside it as its name (`labels`).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Iterable

from framework.core.trials import Trials

UNKNOWN = "unknown"  # a launch whose rows name no machine at all

_SMI_L = re.compile(r"^GPU\s+(\d+):\s*(.*?)\s*\(UUID:\s*([^)\s]+)\s*\)\s*$")


def parse_nvidia_smi_l(text: str | None) -> list[dict[str, Any]]:
    """`nvidia-smi -L`'s lines (``GPU 0: NVIDIA H200 (UUID: GPU-...)``) as [{index, name, uuid}]."""
    out = []
    for line in (text or "").splitlines():
        m = _SMI_L.match(line.strip())
        if m:
            out.append({"index": int(m.group(1)), "name": m.group(2), "uuid": m.group(3)})
    return out


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:12]


def machine_id(host: str | None, cpu: str | None = None, gpu_uuids: Iterable[str | None] = (),
               label: str | None = None) -> str:
    """A stable id: sha256 of the GPUs' UUIDs when any are known (a label still tells apart two runs that
    share GPUs on purpose), else of host, CPU model and label; 12 hex digits."""
    uuids = sorted(str(u) for u in gpu_uuids if u)
    if uuids:
        return _digest("gpu:" + ",".join(uuids) + (f"|label:{label}" if label else ""))
    return _digest(f"host:{host}|cpu:{cpu}" + (f"|label:{label}" if label else ""))


def hardware_id(host: str | None, cpu: str | None = None, gpu_uuids: Iterable[str | None] = ()) -> str:
    """The machine the hardware says, whatever it is called: `machine_id` without the label."""
    return machine_id(host, cpu, gpu_uuids)


def hardware_of(machine: dict[str, Any]) -> str:
    """A launch row's `machine` field by its hardware (host, CPU, GPU UUIDs); a field that names none of
    them (a hand-written row, or a test's) is known only by its id."""
    uuids = [g.get("uuid") for g in machine.get("gpus") or [] if isinstance(g, dict)]
    if any(uuids) or machine.get("host") or machine.get("cpu"):
        return hardware_id(machine.get("host"), machine.get("cpu"), uuids)
    return str(machine.get("id"))


def identity(host: str | None, cpu: str | None, gpus: list[dict[str, Any]] | None,
             label: str | None = None) -> dict[str, Any]:
    """The `machine` field of a launch row: host, CPU, GPUs ({uuid, name}), label and their id."""
    gpus = [{"uuid": g.get("uuid"), "name": g.get("name")} for g in gpus or []]
    return {"id": machine_id(host, cpu, [g["uuid"] for g in gpus], label), "host": host, "cpu": cpu,
            "gpus": gpus, "label": label}


def with_server_gpus(machine: dict[str, Any], server_info: dict[str, Any] | None) -> dict[str, Any]:
    """The launch's machine with the GPUs its server says it used (`server_info.hardware.gpus`, the GPU
    server), which are the devices that ran it, rather than every GPU the client's host sees."""
    used = server_gpus(server_info)
    if not used:
        return machine
    return identity(machine.get("host"), machine.get("cpu"), used, machine.get("label"))


def server_gpus(server_info: dict[str, Any] | None) -> list[dict[str, Any]]:
    """[{uuid, name}] of the GPUs a server reported using, where it names them by UUID."""
    hardware = (server_info or {}).get("hardware") if isinstance(server_info, dict) else None
    gpus = (hardware or {}).get("gpus") if isinstance(hardware, dict) else None
    return [g for g in gpus or [] if isinstance(g, dict) and g.get("uuid")]


def _from_environment(env: dict[str, Any], by_hardware: bool = False) -> str:
    uuids = [g.get("uuid") for g in env.get("gpus") or [] if isinstance(g, dict)]
    if by_hardware and (any(uuids) or env.get("cpu")):
        return hardware_id(env.get("host"), env.get("cpu"), uuids)
    if env.get("machine_id"):
        return str(env["machine_id"])
    if any(uuids):
        return machine_id(env.get("host"), None, uuids, env.get("label"))
    gpu = env.get("gpu") if isinstance(env.get("gpu"), dict) else {}
    names = ",".join(sorted(str(n) for n in (gpu or {}).get("names") or []))
    return _digest(f"env:{env.get('host')}|{env.get('machine')}|{names}")


def launch_machines(rows: Iterable[dict[str, Any]], by_hardware: bool = False) -> dict[str, str]:
    """{launch_id: machine id} for every launch row, in file order.

    A launch's machine is, in this order: its row's own `machine.id` (`by_hardware`: its hardware,
    `hardware_of`, so a label does not make a machine); else the UUIDs of the GPUs its server
    reported (`server_info.hardware.gpus`); else the `environment` row in force when it was written (the
    last one before it: a resume on another machine writes its own); else `UNKNOWN`.
    """
    out: dict[str, str] = {}
    weak: dict[str, str | None] = {}  # launches told only by a host (an environment row without GPU UUIDs) or not
    named: dict[str, set[str]] = {}  # host -> the ids that launch rows' own `machine` fields give it
    for r, env in Trials.of(rows).launches_in_environment():
        if r.get("launch_id") is None:
            continue
        lid = str(r["launch_id"])
        own = r.get("machine")
        if isinstance(own, dict) and own.get("id"):
            out[lid] = hardware_of(own) if by_hardware else str(own["id"])
            named.setdefault(str(own.get("host")), set()).add(out[lid])
            continue
        used = server_gpus(r.get("server_info"))
        if used:
            out[lid] = machine_id(None, None, [g["uuid"] for g in used])
        elif env is not None:
            out[lid] = _from_environment(env, by_hardware)
            uuids = [g.get("uuid") for g in env.get("gpus") or [] if isinstance(g, dict)]
            if not env.get("machine_id") and not any(uuids):
                weak[lid] = str(env.get("host"))
        else:
            out[lid], weak[lid] = UNKNOWN, None
    # A launch written before rows named their machine (an older framework's, reused by a resume) is not a
    # machine of its own: it joins the one machine its host's rows name, or, told by nothing, the one machine
    # of the whole file. Where that is not one machine, it stays apart.
    known = {v for k, v in out.items() if k not in weak}
    for lid, host in weak.items():
        ids = named.get(host, set()) if host is not None else known
        if len(ids) == 1:
            out[lid] = next(iter(ids))
    return out


def scope(machines: int) -> str:
    """The population a verdict covers, in words."""
    return "this machine" if machines <= 1 else f"{machines} machines"
