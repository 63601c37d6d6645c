"""The trials file as it is written: one JSON line per event, flushed at once; and what a resume reuses of it."""

from __future__ import annotations

import errno
import json
import os
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

from omegaconf import OmegaConf

from framework.core.trials import Trials
from framework.errors import ConfigError, StorageError
from framework.records import ledger
from framework.records.trials import read_json_object, read_trials
from framework.run.context import RunContext
from framework.run.redaction import Redactor


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")

class TrialsWriter:
    """Append-only JSONL, one line per event, written at once (threads share it under a lock).

    Each line goes out in one ``os.write``; a write that fails or comes up short (a full disk) is cut
    back, so the file holds whole rows only, and the writer refuses every later row with the same
    StorageError, naming the directory to resume from. A resume reuses every launch that completed.
    """

    def __init__(self, path: Path, redactor: Redactor | None = None) -> None:
        self.path = path
        self.redactor = redactor or Redactor()
        self._lock = threading.Lock()
        self.failed: StorageError | None = None
        try:
            self._fd: int | None = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StorageError(f"{path}: cannot create the trials file ({exc.strerror})") from None
        self.rows: list[dict[str, Any]] = []

    def _refuse(self, why: str) -> StorageError:
        run_dir = self.path.parent
        self.failed = StorageError(
            f"{self.path}: cannot write a trial row ({why}); the file holds whole rows only; "
            f"free space and resume with resume={run_dir}")
        return self.failed

    def write(self, row: dict[str, Any]) -> None:
        row = self.redactor.scrub(row)
        line = (json.dumps(row, separators=(",", ":"), sort_keys=True) + "\n").encode("utf-8")
        with self._lock:
            if self.failed is not None:
                raise self.failed
            assert self._fd is not None, "write after close"
            size = os.fstat(self._fd).st_size
            try:
                written = os.write(self._fd, line)
                if written != len(line):
                    raise OSError(errno.ENOSPC, f"short write, {written} of {len(line)} bytes")
            except OSError as exc:
                try:
                    os.ftruncate(self._fd, size)
                except OSError:
                    pass
                raise self._refuse(exc.strerror or str(exc)) from None
            self.rows.append(row)

    def sync(self) -> None:
        with self._lock:
            if self._fd is None:
                return
            try:
                os.fsync(self._fd)
            except OSError as exc:
                if self.failed is None:
                    raise self._refuse(exc.strerror or str(exc)) from None

    def close(self) -> None:
        try:
            self.sync()
        finally:
            with self._lock:
                if self._fd is not None:
                    os.close(self._fd)
                    self._fd = None

def completed_launches(rows: Iterable[dict[str, Any]], requests_n: int) -> dict[str, list[dict[str, Any]]]:
    """Launches whose outcome is complete: a start-up failure, or a finished workload.

    The client's `workload` row is written when a launch's workload has ended; trials files from
    before it existed fall back to counting `requests_n` measured requests.
    """
    trials = Trials(rows)
    done = {}
    marked = bool(trials.of_kind("workload"))
    for launch_id, group in trials.by_launch().items():
        launch = Trials(group)
        if not launch.of_kind("launch"):
            continue
        measured = [r for r in launch.of_kind("request") if not r["warmup"]]
        ended = bool(launch.of_kind("workload")) if marked else len(measured) >= requests_n
        if not launch.of_kind("launch")[-1]["ok"] or ended:
            done[launch_id] = group
    return done


def _same_hypothesis(ctx: RunContext, run_dir: Path) -> None:
    old_cfg = run_dir / ".hydra" / "config.yaml"
    if old_cfg.exists():
        before = OmegaConf.load(old_cfg)
        if before.get("hypothesis") != ctx.config.get("hypothesis"):
            raise ConfigError("command line", "resume",
                              f"{run_dir} ran hypothesis {before.get('hypothesis')!r}, "
                              f"not {ctx.config.get('hypothesis')!r}")


def reuse(ctx: RunContext, writer: TrialsWriter) -> tuple[set[str], dict[str, int]]:
    """Copy complete launches of an interrupted run into this one; count earlier attempts.

    `resume=[A,B]` (`ctx.resume_also`): the complete launches of every directory, in that order, a launch
    taken from the first that has it, so runs of one design on several machines (machine.slot) become one.
    """
    reused: set[str] = set()
    attempts: dict[str, int] = {}
    for run_dir in [ctx.resume, *ctx.resume_also] if ctx.resume is not None else []:
        if not (run_dir / "trials.jsonl").exists():
            continue
        _same_hypothesis(ctx, run_dir)
        more, tries = _reuse_one(ctx, writer, run_dir, reused)
        reused |= more
        for base, a in tries.items():
            attempts[base] = max(attempts.get(base, 0), a)
    return reused, attempts


def _reuse_one(ctx: RunContext, writer: TrialsWriter, run_dir: Path, taken: set[str]
               ) -> tuple[set[str], dict[str, int]]:
    """One directory's complete launches (those not `taken` from an earlier one) copied in; its attempts."""
    old = read_trials(run_dir / "trials.jsonl")
    same_file = (run_dir / "trials.jsonl").resolve() == writer.path.resolve()
    attempts: dict[str, int] = {}
    for row in Trials(old).of_kind("launch"):
        base, _, a = row["launch_id"].rpartition("-a")
        attempts[base] = max(attempts.get(base, 0), int(a))
    done = completed_launches(old, ctx.design.requests)
    reused: set[str] = set()
    if same_file:  # resuming into the run's own directory: its rows are already in the file, keep them as they are
        writer.rows.extend(old)
        return {launch_id.rpartition("-a")[0] for launch_id in done}, attempts
    keep = {launch_id for launch_id in done if launch_id.rpartition("-a")[0] not in taken}
    # rows from before launch rows named their machine (0.3) name it by the environment row in force: keep those
    index = Trials(old)
    unnamed = any(not r.get("machine") for r in index.of_kind("launch") if r["launch_id"] in keep)
    environments = {id(r) for r in index.of_kind("environment")} if unnamed else set()
    for row in old:  # in file order, so each launch stays after the environment row it ran under
        if id(row) in environments or row.get("launch_id") in keep:
            writer.write({**row, "reused_from": str(run_dir)})
    reused = {launch_id.rpartition("-a")[0] for launch_id in keep}
    writer.sync()
    return reused, attempts


def previous_verdict(ctx: RunContext) -> dict[str, Any] | None:
    """The verdict record of the run being resumed, if it already had one."""
    rec = read_json_object(ctx.resume / "verdict.json") if ctx.resume is not None else None
    # a record without its ledger hash never reached the ledger (a full disk, or a sweep not yet recorded)
    return rec if rec is not None and ledger.is_kind(rec, "verdict") and rec.get("hash") else None
