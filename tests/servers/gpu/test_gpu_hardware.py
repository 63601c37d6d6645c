"""The GPU server's hardware facts: each GPU it uses is named by UUID, matched to nvidia-smi's row (pure parts)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="the GPU server needs torch (pip install -e '.[gpu]')")
pytestmark = pytest.mark.gpu  # the GPU server on the CPU (torch): its own tier, `pytest -m gpu`

from framework.servers.gpu.hardware import SMI_FIELDS, gpus_used, parse_smi  # noqa: E402

SMI = ("0, GPU-aaaa-1, NVIDIA H200, 00000000:19:00.0, 580.159.04, 345 MHz, 3201 MHz, 1980 MHz, 3201 MHz, 700.00 W, 30, "
       "Enabled\n1, GPU-bbbb-2, NVIDIA H200, 00000000:3B:00.0, 580.159.04, 345 MHz, 3201 MHz, 1980 MHz, 3201 MHz, "
       "700.00 W, 31, Enabled\n")


def test_smi_rows_carry_uuid_and_name():
    rows = parse_smi(SMI)
    assert [r["uuid"] for r in rows] == ["GPU-aaaa-1", "GPU-bbbb-2"]
    assert set(rows[0]) == set(SMI_FIELDS)


def test_a_renumbered_device_is_matched_to_its_smi_row_by_uuid():
    # CUDA_VISIBLE_DEVICES=1: torch's device 0 is nvidia-smi's GPU 1
    got = gpus_used(parse_smi(SMI), ["NVIDIA H200"], ["GPU-bbbb-2"])
    assert got == [{"index": 0, "uuid": "GPU-bbbb-2", "name": "NVIDIA H200", "smi_index": "1",
                    "pci_bus_id": "00000000:3B:00.0"}]


def test_without_nvidia_smi_torch_names_the_gpu():
    assert gpus_used(None, ["NVIDIA H200"], [None]) == [
        {"index": 0, "uuid": None, "name": "NVIDIA H200", "smi_index": None, "pci_bus_id": None}]
