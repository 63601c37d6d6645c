"""audit's machine cross-check (issue 31): a launch row's `machine` against its own id, the environment row it
ran under, its server's GPUs and, for a resume's copy, the source trials file. Forged host or GPU rows fail."""

from __future__ import annotations

import json
from pathlib import Path

from framework.core.machine import identity
from framework.records import machine_audit

GPUS = [{"uuid": "GPU-1", "name": "NVIDIA H200"}, {"uuid": "GPU-2", "name": "NVIDIA H200"}]


def _env(host: str = "vm", label: str | None = "a", gpus: list | None = None) -> dict:
    ident = identity(host, "AMD EPYC", GPUS if gpus is None else gpus, label)
    return {"kind": "environment", "backend": "gpu", "host": host, "machine": "x86_64", "cpu": "AMD EPYC",
            "gpus": ident["gpus"], "label": label, "machine_id": ident["id"], "written": "t"}


def _launch(lid: str, machine: dict, used: list | None = None) -> dict:
    info = {"hardware": {"gpus": used}} if used is not None else {}
    return {"kind": "launch", "launch_id": lid, "condition": 0, "ok": True, "machine": machine, "server_info": info}


def _honest() -> list[dict]:
    host = identity("vm", "AMD EPYC", GPUS, "a")
    used = [{"index": 1, "uuid": "GPU-2", "name": "NVIDIA H200"}]
    return [_env(), _launch("c0-r0-a1", identity("vm", "AMD EPYC", used, "a"), used), _launch("c0-r1-a1", host)]


def _none(_: str) -> Path | None:
    return None


def test_an_honest_runs_machines_agree_with_its_environment_and_servers() -> None:
    assert machine_audit.problems(_honest(), _none) == []
    assert machine_audit.problems([{"kind": "launch", "launch_id": "c0-r0-a1"}], _none) == []  # 0.2: no field


def test_a_forged_host_fails_with_or_without_its_id_recomputed() -> None:
    rows = _honest()
    rows[2] = {**rows[2], "machine": {**rows[2]["machine"], "host": "other-host"}}
    found = machine_audit.problems(rows, _none)
    assert found == ["launch c0-r1-a1's machine says host 'other-host', but the environment row it ran under "
                     "says 'vm'"]
    # without GPUs the host is part of the id: an edit that leaves the id fails on it too
    bare = [_env(gpus=[]), _launch("c0-r0-a1", {**identity("vm", "AMD EPYC", [], "a"), "host": "other-host"})]
    assert any("not the id of its own host" in p for p in machine_audit.problems(bare, _none))


def test_forged_gpus_fail_against_the_server_and_the_host() -> None:
    rows = _honest()
    rows[1] = {**rows[1], "machine": identity("vm", "AMD EPYC", [{"uuid": "GPU-9", "name": "NVIDIA H200"}], "a")}
    assert any("its server reported running on ['GPU-2']" in p for p in machine_audit.problems(rows, _none))
    forged = [{"index": 0, "uuid": "GPU-9", "name": "NVIDIA H200"}]  # the server's word forged as well
    rows[1] = _launch("c0-r1-a1", identity("vm", "AMD EPYC", forged, "a"), forged)
    assert any("which the host it ran on" in p for p in machine_audit.problems(rows, _none))
    rows = _honest()
    rows[2] = {**rows[2], "machine": identity("vm", "AMD EPYC", GPUS[:1], "a")}  # a launch with no server GPUs
    assert any("the host has ['GPU-1', 'GPU-2']" in p for p in machine_audit.problems(rows, _none))


def test_a_relabelled_launch_fails_against_its_environment_row() -> None:
    rows = _honest()
    rows[2] = {**rows[2], "machine": identity("vm", "AMD EPYC", GPUS, "b")}
    assert any("says label 'b'" in p for p in machine_audit.problems(rows, _none))


def test_a_resumes_copy_is_held_to_its_source_file(tmp_path: Path) -> None:
    src = tmp_path / "run0"
    src.mkdir()
    (src / "trials.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _honest()))
    copied = [{**r, "reused_from": str(src)} for r in _honest()[1:]]

    def source(p: str) -> Path | None:
        return Path(p) if Path(p).is_file() else None

    assert machine_audit.problems(copied, source) == []
    forged = [copied[0], {**copied[1], "machine": identity("elsewhere", "AMD EPYC", GPUS, "a")}]
    found = machine_audit.problems(forged, source)
    assert len(found) == 1 and "copied from" in found[0] and "says it ran on machine" in found[0]
    # the source is gone: the copy is still held to its own id and its server's GPUs
    assert machine_audit.problems(forged, _none) == []
    broken = [{**copied[1], "machine": {**copied[1]["machine"], "gpus": GPUS[:1]}}]
    assert machine_audit.problems(broken, _none)
