"""The environment fingerprint recorded with every verdict: where and with what it was measured.

A verdict moves when the stack moves (the seed's CUDA 12.8 -> 13 upgrade turned "crashes" into
"works"), so `audit history` compares these fields between records. Everything here tolerates
absence: no git, no checkout, no `nvidia-smi` all give null rather than an error. The runner adds
the backend and the server's `/get_server_info` on top (see `with_server`).
"""

from __future__ import annotations

import platform
import re
import socket
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

# The project's runtime dependencies (pyproject) plus what a real SGLang stack reports.
PACKAGES = (
    "framework", "hydra-core", "omegaconf", "pydantic", "pyyaml", "starlette", "uvicorn", "requests",
    "rich", "numpy", "pandas", "scipy", "statsmodels", "matplotlib", "filelock", "psutil",
    "sglang", "torch", "flashinfer-python", "sgl-kernel",
)

_PROJECT_ROOT = Path(__file__).resolve().parents[2]


def _run(argv: list[str], cwd: Path | None = None, timeout: float = 10.0) -> str | None:
    try:
        out = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def git_info(root: Path = _PROJECT_ROOT) -> dict[str, Any]:
    """Commit and dirty flag of the project checkout; nulls when git or the checkout is absent."""
    commit = _run(["git", "rev-parse", "HEAD"], cwd=root)
    if commit is None:
        return {"commit": None, "dirty": None}
    status = _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root)
    return {"commit": commit.strip(), "dirty": None if status is None else bool(status.strip())}


def parse_nvidia_smi(query_csv: str | None, header: str | None) -> dict[str, Any] | None:
    """Pure: GPU names and driver from the CSV query, CUDA version from the banner of plain `nvidia-smi`."""
    if query_csv is None:
        return None
    names, drivers = [], []
    for line in query_csv.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if parts and parts[0]:
            names.append(parts[0])
            if len(parts) > 1:
                drivers.append(parts[1])
    cuda = None
    if header:
        m = re.search(r"CUDA Version:\s*([0-9.]+)", header)
        cuda = m.group(1) if m else None
    return {"names": names, "count": len(names), "driver": drivers[0] if drivers else None, "cuda": cuda}


def gpu_info() -> dict[str, Any] | None:
    query = _run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"])
    if query is None:
        return None
    return parse_nvidia_smi(query, _run(["nvidia-smi"]))


def fingerprint() -> dict[str, Any]:
    """Host, platform, Python, package versions, git state and GPU/driver/CUDA (null when absent)."""
    gpu = gpu_info()
    return {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "packages": package_versions(),
        "git": git_info(),
        "gpu": gpu,
        "cuda": gpu.get("cuda") if gpu else None,
    }


def with_server(env: dict[str, Any], backend: str, server_info: dict[str, Any] | None) -> dict[str, Any]:
    """The fingerprint plus what the runner learns from the server (`/get_server_info`)."""
    info = server_info or {}
    return {**env, "backend": backend, "server_info": info, "server_version": info.get("version")}
