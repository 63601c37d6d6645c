"""What a GPU server ran on, read once at start: GPUs, driver, CUDA, torch, NCCL, clocks (null when absent)."""

from __future__ import annotations

import subprocess
from typing import Any

import torch

SMI_FIELDS = ("index", "name", "driver_version", "clocks.sm", "clocks.mem", "clocks.max.sm", "clocks.max.mem",
              "power.limit", "temperature.gpu", "persistence_mode")


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
    return info
