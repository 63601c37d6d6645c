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


def test_by_hardware_two_labels_over_one_host_cpu_and_gpus_are_one_machine():
    """Issue 31: slots labelled a and b on one host were two machines; by hardware (rules v4) they are one."""
    gpus = [{"uuid": "GPU-a", "name": "H200"}]
    a, b = machine.identity("vm", "AMD", gpus, label="a"), machine.identity("vm", "AMD", gpus, label="b")
    rows = [{"kind": "launch", "launch_id": "c0-r0-a1", "machine": a},
            {"kind": "launch", "launch_id": "c0-r1-a1", "machine": b}]
    assert len(set(machine.launch_machines(rows).values())) == 2  # by label (rules v3), as it was
    by_hw = machine.launch_machines(rows, by_hardware=True)
    assert set(by_hw.values()) == {machine.hardware_id("vm", "AMD", ["GPU-a"])}
    # different GPUs stay different machines whatever the host is called; no GPUs: host and CPU tell them apart
    other = machine.identity("vm", "AMD", [{"uuid": "GPU-b", "name": "H200"}], label="a")
    rows.append({"kind": "launch", "launch_id": "c0-r2-a1", "machine": other})
    assert len(set(machine.launch_machines(rows, by_hardware=True).values())) == 2
    cpu_only = [{"kind": "launch", "launch_id": f"c0-r{i}-a1", "machine": machine.identity(h, "AMD", [], label=lab)}
                for i, (h, lab) in enumerate((("box", "x"), ("box", "y"), ("box2", "x")))]
    got = machine.launch_machines(cpu_only, by_hardware=True)
    assert got["c0-r0-a1"] == got["c0-r1-a1"] != got["c0-r2-a1"]


def test_by_hardware_an_environment_row_is_its_hardware_not_its_label():
    env = {"kind": "environment", "host": "box", "cpu": "AMD", "gpus": [], "label": "n1",
           "machine_id": machine.machine_id("box", "AMD", [], "n1")}
    rows = [env, {"kind": "launch", "launch_id": "c0-r0-a1"},
            {**env, "label": "n2", "machine_id": machine.machine_id("box", "AMD", [], "n2")},
            {"kind": "launch", "launch_id": "c0-r1-a1"}]
    assert len(set(machine.launch_machines(rows).values())) == 2
    assert set(machine.launch_machines(rows, by_hardware=True).values()) == {machine.hardware_id("box", "AMD")}
    # a hand-written field with an id only keeps its id
    assert machine.hardware_of({"id": "machine-1"}) == "machine-1"
