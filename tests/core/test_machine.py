"""What names a launch's machine: nvidia-smi -L, a stable id (GPU UUIDs first), and the rows of every format."""

from __future__ import annotations

from framework.core import machine

SMI_L = """GPU 0: NVIDIA H200 (UUID: GPU-2847135a-3f5c-ef37-6867-47d8eae9230c)
GPU 1: NVIDIA H200 (UUID: GPU-11111111-2222-3333-4444-555555555555)
"""


def test_nvidia_smi_l_lines_give_index_name_and_uuid():
    gpus = machine.parse_nvidia_smi_l(SMI_L)
    assert gpus == [{"index": 0, "name": "NVIDIA H200", "uuid": "GPU-2847135a-3f5c-ef37-6867-47d8eae9230c"},
                    {"index": 1, "name": "NVIDIA H200", "uuid": "GPU-11111111-2222-3333-4444-555555555555"}]
    assert machine.parse_nvidia_smi_l(None) == [] and machine.parse_nvidia_smi_l("No devices were found") == []


def test_gpu_uuids_alone_make_the_id_so_two_vms_called_vm_differ():
    a = machine.identity("vm", "Intel Xeon", [{"uuid": "GPU-a", "name": "NVIDIA H200"}])
    b = machine.identity("vm", "Intel Xeon", [{"uuid": "GPU-b", "name": "NVIDIA H200"}])
    assert a["id"] != b["id"] and len(a["id"]) == 12
    # the same GPUs give the same id whatever else the code that wrote the row knew of the host
    assert machine.machine_id(None, None, ["GPU-a"]) == a["id"]
    assert machine.identity("vm", "AMD", [])["id"] != machine.identity("vm", "AMD", [], label="node2")["id"]
    assert machine.identity("vm", "AMD", [])["id"] == machine.identity("vm", "AMD", [])["id"]


def test_a_launch_names_its_machine_by_its_own_field_then_its_servers_gpus_then_the_environment_row():
    rows = [
        {"kind": "launch", "launch_id": "c0-r0-a1"},  # before any environment row
        {"kind": "environment", "host": "vm", "machine": "x86_64", "gpu": {"names": ["NVIDIA H200"]}},
        {"kind": "launch", "launch_id": "c0-r1-a1"},
        {"kind": "launch", "launch_id": "c0-r2-a1",
         "server_info": {"hardware": {"gpus": [{"index": 0, "uuid": "GPU-a", "name": "NVIDIA H200"}]}}},
        {"kind": "launch", "launch_id": "c0-r3-a1", "machine": {"id": "abcdef012345"}},
        {"kind": "environment", "host": "vm", "machine": "x86_64", "machine_id": "fedcba987654"},
        {"kind": "launch", "launch_id": "c0-r4-a1"},
    ]
    got = machine.launch_machines(rows)
    assert got["c0-r0-a1"] == machine.UNKNOWN
    assert got["c0-r2-a1"] == machine.machine_id(None, None, ["GPU-a"])
    assert got["c0-r3-a1"] == "abcdef012345" and got["c0-r4-a1"] == "fedcba987654"
    assert got["c0-r1-a1"] not in (machine.UNKNOWN, got["c0-r4-a1"])


def test_a_launch_an_older_framework_wrote_joins_the_one_machine_its_host_or_its_file_names():
    me = machine.identity("box", "AMD EPYC", [])
    old = [{"kind": "launch", "launch_id": "c0-r0-a1"}]  # 0.1: no environment row, no machine field
    env = [{"kind": "environment", "host": "box", "machine": "x86_64"},  # 0.2: a host, no machine id
           {"kind": "launch", "launch_id": "c0-r1-a1"}]
    new = [{"kind": "launch", "launch_id": "c0-r2-a1", "machine": me}]
    got = machine.launch_machines(old + env + new)
    assert set(got.values()) == {me["id"]}  # one machine, as it was: a resume of an old run on this host
    other = {"kind": "launch", "launch_id": "c0-r3-a1", "machine": machine.identity("box2", "AMD EPYC", [])}
    got = machine.launch_machines(old + env + new + [other])
    assert got["c0-r0-a1"] == machine.UNKNOWN and got["c0-r1-a1"] == me["id"]  # two machines: by host only


def test_the_server_gpus_replace_the_hosts_in_a_launchs_machine():
    host = machine.identity("vm", "AMD", [{"uuid": "GPU-a", "name": "H200"}, {"uuid": "GPU-b", "name": "H200"}])
    used = machine.with_server_gpus(host, {"hardware": {"gpus": [{"uuid": "GPU-b", "name": "H200"}]}})
    assert used["gpus"] == [{"uuid": "GPU-b", "name": "H200"}]
    assert used["id"] == machine.machine_id(None, None, ["GPU-b"])
    assert machine.with_server_gpus(host, {"version": "0.5"}) == host
    assert machine.scope(1) == "this machine" and machine.scope(3) == "3 machines"
