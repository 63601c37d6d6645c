"""The launch's plan, resolved: framework.core.workload's plan with the workload's dataset read from disk.

A dataset is read whole before the first request, so it is bounded: a regular file (a device such as
`/dev/zero` never ends, and opening a FIFO blocks until a writer comes) of at most `MAX_DATASET_BYTES`
and `MAX_DATASET_ROWS` rows.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from framework.core.hashing import sha256_file
from framework.core.workload import DatasetRow, Plan, Workload, make_plan, parse_dataset

MAX_DATASET_BYTES = 1 << 30  # 1 GiB: ShareGPT_V3_unfiltered_cleaned_split.json, bench_serving's, is 642 MiB
MAX_DATASET_ROWS = 2_000_000


def read_bounded(p: Path, limit: int = MAX_DATASET_BYTES) -> str:
    """The text of a regular file of at most `limit` bytes. Raises ValueError (a device, a FIFO, too large)."""
    try:
        st = os.stat(p)  # before opening: open() on a FIFO blocks until something writes to it
    except OSError as exc:
        raise ValueError(f"cannot read {p}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else "a directory" if stat.S_ISDIR(st.st_mode)
                else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "not a regular file")
        raise ValueError(f"{p} is {kind}; a dataset must be a regular file")
    if st.st_size > limit:
        raise ValueError(f"{p} is {st.st_size:,} bytes; a dataset may have at most {limit:,}")
    try:
        with open(p, "rb") as f:
            data = f.read(limit + 1)  # a file that grew since stat() is still bounded
        if len(data) > limit:
            raise ValueError(f"{p} is larger than {limit:,} bytes, the most a dataset may have")
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read {p}: {exc}") from None


def load_dataset(path: str | Path, fmt: str = "auto", sha256: str | None = None
                 ) -> tuple[list[DatasetRow], dict[str, Any]]:
    """A dataset file's rows and what the record keeps of it (path, sha256). Raises ValueError, also when the
    file's sha256 is not the registered `sha256`."""
    p = Path(path)
    if sha256 is not None and (found := sha256_file(p)) != sha256:
        raise ValueError(f"{p} has sha256 {found}, not the registered {sha256}: the prompts changed")
    text = read_bounded(p)
    try:
        rows = parse_dataset(text, fmt, MAX_DATASET_ROWS)
    except (ValueError, json.JSONDecodeError, RecursionError) as exc:
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
    rows, info = load_dataset(path, workload.dataset.format, workload.dataset.sha256)
    return make_plan(workload, requests_n=requests_n, warmup=warmup, seed=seed, dataset=rows, dataset_info=info)
