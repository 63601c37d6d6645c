"""What a GPU server ran on, read once at start: GPUs (UUID and name each), driver, CUDA, torch, NCCL, clocks.

Every field is null when absent. Each GPU's UUID (``GPU-...``, from ``nvidia-smi``, else torch's device
properties) is what tells two lent machines apart: every one reports ``host: vm``.
"""

from __future__ import annotations

import subprocess
from typing import Any

import torch

SMI_FIELDS = ("index", "uuid", "name", "pci.bus_id", "driver_version", "clocks.sm", "clocks.mem", "clocks.max.sm",
              "clocks.max.mem", "power.limit", "temperature.gpu", "persistence_mode")


def parse_smi(csv: str) -> list[dict[str, str]]:
    """Pure: one dict per GPU from ``nvidia-smi --query-gpu=... --format=csv,noheader``."""
    return [dict(zip(SMI_FIELDS, (p.strip() for p in line.split(",")), strict=False))
            for line in csv.strip().splitlines() if line]


def smi_gpus() -> list[dict[str, str]] | None:
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_smi(out.stdout) if out.returncode == 0 else None


def torch_uuid(index: int) -> str | None:
    """``GPU-<uuid>`` as nvidia-smi prints it, from torch's device properties (None on builds without it)."""
    try:
        uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    except Exception:  # noqa: BLE001 - no such device, no driver
        return None
    return f"GPU-{uuid}" if uuid is not None else None


def gpus_used(smi: list[dict[str, str]] | None, names: list[str], uuids: list[str | None]) -> list[dict[str, Any]]:
    """Pure: index, UUID and name of each GPU this server uses, nvidia-smi's reading first, torch's where absent.

    ``CUDA_VISIBLE_DEVICES`` renumbers devices, so a torch index is matched to nvidia-smi's row by UUID.
    """
    by_uuid = {row.get("uuid"): row for row in smi or [] if row.get("uuid")}
    out = []
    for i, (name, uuid) in enumerate(zip(names, uuids, strict=False)):
        row = by_uuid.get(uuid, {})
        out.append({"index": i, "uuid": uuid, "name": row.get("name") or name,
                    "smi_index": row.get("index"), "pci_bus_id": row.get("pci.bus_id")})
    return out


def facts(device: torch.device, tp_size: int) -> dict[str, Any]:
    """Versions and, per GPU, the clocks at start (the launch's own reading, kept with every launch)."""
    info: dict[str, Any] = {"device": device.type, "torch": torch.__version__, "cuda": torch.version.cuda,
                            "nccl": None, "gpus_used": tp_size if device.type == "cuda" else 0}
    if device.type == "cuda":
        try:
            info["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception:  # noqa: BLE001 - a build without NCCL
            pass
        info["gpu_names"] = [torch.cuda.get_device_name(i) for i in range(tp_size)]
        info["gpus_visible"] = torch.cuda.device_count()
        info["nvidia_smi_at_start"] = smi_gpus()
        info["gpus"] = gpus_used(info["nvidia_smi_at_start"], info["gpu_names"],
                                 [torch_uuid(i) for i in range(tp_size)])
    return info
