"""The launch's plan, resolved: framework.core.workload's plan with the workload's dataset read from disk."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from framework.core.hashing import sha256_file
from framework.core.workload import DatasetRow, Plan, Workload, make_plan, parse_dataset


def load_dataset(path: str | Path, fmt: str = "auto") -> tuple[list[DatasetRow], dict[str, Any]]:
    """A dataset file's rows and what the record keeps of it (path, sha256). Raises ValueError."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read {p}: {exc}") from None
    try:
        rows = parse_dataset(text, fmt)
    except (ValueError, json.JSONDecodeError) as exc:
        raise ValueError(f"{p}: {exc}") from None
    return rows, {"path": str(p), "sha256": sha256_file(p)}


def resolve_plan(workload: Workload, *, requests_n: int, warmup: int, seed: int,
                 base_dir: Path | None = None) -> Plan:
    """The launch's plan, with the dataset read from disk where the workload names one."""
    if workload.dataset is None:
        return make_plan(workload, requests_n=requests_n, warmup=warmup, seed=seed)
    path = Path(workload.dataset.path)
    if not path.is_absolute() and base_dir is not None and not path.exists():
        path = base_dir / path
    rows, info = load_dataset(path, workload.dataset.format)
    return make_plan(workload, requests_n=requests_n, warmup=warmup, seed=seed, dataset=rows, dataset_info=info)
