"""The GPU server's build-time choices that can differ between machines, for `server_info.gpu_server.build`.

Why (issue 33): the same code on a third H200 gave 7.58x where two others gave 9.0x, and part of the gap was
`torch.compile`'s autotuning choosing kernels 4-9% slower there. An effect that moves between machines may
be the machine or the build, so a launch records what its build chose: whether autotuning was on and with
which Inductor settings, the batch-1 GEMV path actually taken, and a digest of the compile cache's autotune
choices (Inductor writes each tuned kernel's chosen config as a ``*.best_config`` file; the digest hashes
their names and contents), so two launches with the same digest compiled the same kernels. torch is
imported lazily: `cache_digest` is a pure function of a directory, tested without it.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

INDUCTOR_SETTINGS = ("max_autotune", "max_autotune_gemm", "max_autotune_pointwise", "coordinate_descent_tuning",
                     "max_autotune_gemm_backends")


def cache_digest(root: Path | None) -> dict[str, Any]:
    """The autotune choices in a compile cache: {best_configs: n, sha256} over each ``*.best_config`` file's
    path (relative to `root`) and bytes, in sorted order; {best_configs: 0, sha256: None} when there are none."""
    if root is None or not root.is_dir():
        return {"best_configs": 0, "sha256": None, "note": "no compile cache directory"}
    files = sorted(p for p in root.rglob("*.best_config") if p.is_file())
    h = hashlib.sha256()
    for p in files:
        h.update(str(p.relative_to(root)).encode("utf-8") + b"\0" + p.read_bytes() + b"\0")
    return {"best_configs": len(files), "sha256": h.hexdigest()[:16] if files else None}


def inductor_settings() -> dict[str, Any]:
    """Inductor's autotune switches as this process has them (None when torch has no Inductor)."""
    try:
        from torch._inductor import config
    except Exception:  # noqa: BLE001 - a torch without Inductor records that it has none
        return {}
    return {k: getattr(config, k, None) for k in INDUCTOR_SETTINGS}


def cache_dir() -> Path | None:
    """Inductor's cache directory (TORCHINDUCTOR_CACHE_DIR or its default), or None when torch cannot say."""
    try:
        from torch._inductor.runtime.cache_dir_utils import cache_dir as inductor_cache_dir
        return Path(inductor_cache_dir())
    except Exception:  # noqa: BLE001 - older torch: the environment variable alone
        env = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
        return Path(env) if env else None


def facts(compile_mode: str | None, batch1_gemv: str | None, fused: bool) -> dict[str, Any]:
    """What the build is asked for, at start-up (before anything is compiled)."""
    import torch

    triton = None
    try:
        import triton as triton_mod
        triton = getattr(triton_mod, "__version__", None)
    except Exception:  # noqa: BLE001 - no Triton: nothing is autotuned by it
        pass
    return {"torch": torch.__version__, "cuda": torch.version.cuda, "triton": triton,
            "torch_compile_mode": compile_mode if fused else None,
            "autotune": bool(fused and compile_mode and compile_mode.startswith("max-autotune")),
            "inductor": inductor_settings() if fused else {},
            "batch1_gemv_requested": batch1_gemv if fused else None}


def after_warmup(driver: Any) -> dict[str, Any]:
    """What the build chose, once the server has compiled its pieces: the batch-1 GEMV path taken (the
    split-K kernel falls back to the compiled pieces when no plan fits the shape) and the cache's digest."""
    fused = getattr(driver, "fused", None)
    return {"batch1_gemv": getattr(fused, "batch1_gemv", None) if fused is not None else None,
            "compile_cache": cache_digest(cache_dir()) if fused is not None else None}
