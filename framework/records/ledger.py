"""The append-only, hash-chained JSON Lines ledger of registrations, amendments and verdicts.

Every line is one record. The ledger sets two keys on each record it appends:

- ``prev_hash``: the ``hash`` of the line before it (``GENESIS``, 64 zeros, for the first line);
- ``hash``: the SHA-256 of the record's canonical JSON (sorted keys, compact separators, UTF-8,
  non-finite floats as null) *without* the ``hash`` key.

A sidecar ``PATH.head`` holds ``{"count": n, "hash": last_hash}``, updated under the same lock.

How far the tamper evidence goes:

- Editing, removing or reordering any record breaks the chain at that record (its own hash no longer
  matches, or the next record's ``prev_hash`` no longer points at its predecessor) unless whoever
  edits also rewrites every record after it.
- Removing the *last* records leaves a valid shorter chain; the head file catches that, as does a
  partial last line (a torn write or a cut file).
- Someone who rewrites the whole tail *and* the head file cannot be detected from the files alone.
  Noting the head hash elsewhere (a commit message, a lab notebook, a ticket; ``audit`` prints it)
  closes that gap: any later ledger must still contain that hash at that position.

Appends take an exclusive ``filelock`` on ``PATH.lock``, write the line with ``os.write`` on an
``O_APPEND`` descriptor, ``fsync`` it, read it back, and then replace the head file. A write that
fails or comes up short (a full disk, a quota), a line that does not read back as written, or a
head file that cannot be replaced truncates the ledger back to its size before the append, so it
is exactly as it was and the caller gets one ``LedgerError`` line. Concurrent writers interleave
whole lines only (they hold the lock), and a crash never leaves a record half-chained.

A ledger written by an older version may end in a torn line (a short write it did not roll back):
``verify_chain`` reports it as ``truncated`` with the byte offset to cut it at (``repair_hint``),
and appends are refused until it is cut.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from filelock import FileLock, Timeout
from pydantic import BaseModel

from framework.core.hashing import json_finite
from framework.core.hashing import sha256_file as sha256_file  # re-exported: its callers import it from here
from framework.errors import LedgerError

DEFAULT_LEDGER = "verdicts.jsonl"
GENESIS = "0" * 64


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the ledger, naming the record: 1-based line, hash prefix, hypothesis."""

    line: int | None
    hash: str | None
    hypothesis: str | None
    kind: str  # edited | chain | malformed | truncated | head | trials | recompute | registration | ...
    message: str

    def where(self) -> str:
        parts = [f"line {self.line}" if self.line else "ledger"]
        if self.hash:
            parts.append(self.hash[:12])
        if self.hypothesis:
            parts.append(self.hypothesis)
        return " ".join(parts)

    def __str__(self) -> str:
        return f"{self.where()}: {self.kind}: {self.message}"


# --------------------------------------------------------------------------- pure: hashing


def canonical_json(record: dict[str, Any]) -> str:
    return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def record_hash(record: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON of the record without its own ``hash`` key."""
    body = {k: v for k, v in record.items() if k != "hash"}
    return hashlib.sha256(canonical_json(body).encode("utf-8")).hexdigest()


def to_dict(record: dict[str, Any] | BaseModel) -> dict[str, Any]:
    if isinstance(record, BaseModel):
        record = record.model_dump(mode="json", by_alias=True)
    return json_finite(dict(record))


def seal(record: dict[str, Any] | BaseModel, prev_hash: str) -> dict[str, Any]:
    """The record as it will be stored: with ``prev_hash`` and its own ``hash``."""
    out = to_dict(record)
    out.pop("hash", None)
    out["prev_hash"] = prev_hash
    out["hash"] = record_hash(out)
    return out


# --------------------------------------------------------------------------- locking

LOCK_TIMEOUT_S = 120.0  # appends take milliseconds; a lock held this long is a stuck or foreign process

_locks: dict[str, FileLock] = {}
_locks_guard = threading.Lock()


def check_path(path: str | Path) -> None:
    """LedgerError, in one line, when `path` cannot be a ledger: a directory, or no lock file can be made."""
    path = Path(path)
    if path.is_dir():
        raise LedgerError(f"{path} is a directory; ledger= must name a file, e.g. ledger=verdicts.jsonl")
    if path.exists() and not path.is_file():
        raise LedgerError(f"{path} is not a regular file; ledger= must name a file")
    lock_path = Path(os.path.abspath(os.fspath(path)) + ".lock")
    if lock_path.exists():
        if not lock_path.is_file():
            raise LedgerError(f"{lock_path} (the ledger's lock file) is not a regular file")
        return
    try:
        os.close(os.open(lock_path, os.O_WRONLY | os.O_CREAT, 0o644))
    except OSError as exc:
        raise LedgerError(f"cannot create the ledger's lock file {lock_path}: {exc.strerror}") from None


class _Locked:
    """`with lock(path):` the exclusive lock, or a one-line LedgerError (bad path, or held too long)."""

    def __init__(self, path: str | Path, flock: FileLock) -> None:
        self.path, self.flock = path, flock

    def __enter__(self) -> "_Locked":
        check_path(self.path)
        try:
            self.flock.acquire(timeout=LOCK_TIMEOUT_S)
        except Timeout:
            raise LedgerError(f"{self.flock.lock_file}: another process has held the ledger lock for more than "
                              f"{LOCK_TIMEOUT_S:g} s; is a run stuck? "
                              "(delete the file only if none is running)") from None
        return self

    def __exit__(self, *exc: object) -> None:
        self.flock.release()


def lock(path: str | Path) -> _Locked:
    """The ledger's exclusive lock. One FileLock per path, so nested use in one thread is re-entrant
    (a second FileLock on the same file in the same process would deadlock on flock)."""
    key = os.path.abspath(os.fspath(path)) + ".lock"
    with _locks_guard:
        if key not in _locks:
            _locks[key] = FileLock(key)
        return _Locked(path, _locks[key])


# --------------------------------------------------------------------------- reading


def _last_line(path: Path) -> tuple[bytes | None, bool]:
    """The last line's bytes (without newline), found by reading back from the end in blocks, and
    whether the file ends with a newline. (None, True) for an empty or missing file."""
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return None, True
    with f:
        size = f.seek(0, os.SEEK_END)
        if size == 0:
            return None, True
        f.seek(size - 1)
        complete = f.read(1) == b"\n"
        end = size - 1 if complete else size
        pos, tail = end, b""
        while pos > 0:
            step = min(8192, pos)
            pos -= step
            f.seek(pos)
            tail = f.read(step) + tail
            cut = tail.rfind(b"\n")
            if cut >= 0:
                return tail[cut + 1 :], complete
        return tail, complete


def read_head(path: str | Path) -> dict[str, Any] | None:
    head = Path(os.fspath(path) + ".head")
    try:
        return json.loads(head.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {"count": None, "hash": None, "error": "unreadable head file"}


def lines(path: str | Path) -> Iterator[tuple[int, str, dict[str, Any] | None]]:
    """(1-based line number, raw text, parsed record or None if it is not a JSON object)."""
    with open(path, "rb") as f:
        for n, raw in enumerate(f, start=1):
            text = raw.decode("utf-8", errors="replace").rstrip("\n")
            try:
                obj = json.loads(text)
            except ValueError:
                obj = None
            yield n, text, obj if isinstance(obj, dict) else None


def read(path: str | Path = DEFAULT_LEDGER) -> Iterator[dict[str, Any]]:
    """Every well-formed record, in order (use `verify_chain` to know whether to trust them)."""
    for _, _, obj in lines(path):
        if obj is not None:
            yield obj


def is_kind(record: dict[str, Any] | None, *kinds: str) -> bool:
    """Whether a ledger record (or a run's verdict.json) is of one of `kinds`: the one place the kind is tested."""
    return record is not None and record.get("kind") in kinds


def read_kind(path: str | Path, *kinds: str) -> Iterator[dict[str, Any]]:
    """The well-formed records of `kinds` ("verdict", "exploration", "registration", "amendment"), in order."""
    return (rec for rec in read(path) if is_kind(rec, *kinds))


# --------------------------------------------------------------------------- writing


def _count_lines(path: Path) -> int:
    n = 0
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                n += chunk.count(b"\n")
    except FileNotFoundError:
        return 0
    return n


def _write_head(path: Path, count: int, last_hash: str) -> None:
    head = Path(os.fspath(path) + ".head")
    tmp = head.with_name(head.name + ".tmp")
    data = json.dumps({"count": count, "hash": last_hash}, sort_keys=True).encode()
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            if os.write(fd, data) != len(data):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, head)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(head.parent)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def append(path: str | Path, record: dict[str, Any] | BaseModel) -> dict[str, Any]:
    """Chain `record` onto the ledger at `path` and return the dict as stored (with its hash).

    Refuses (LedgerError) to chain onto a torn last line or onto a ledger that disagrees with its
    head file: appending would paper over the evidence; run ``audit`` and repair by hand.
    """
    path = Path(path)
    if path.parent and not path.parent.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
    with lock(path):
        last, complete = _last_line(path)
        if not complete:
            raise LedgerError(f"{path}: the last line is incomplete (a torn write or a cut file); "
                              f"`python -m framework audit ledger={path}` says how to repair it")
        prev = GENESIS
        if last is not None:
            try:
                prev = json.loads(last)["hash"]
            except (ValueError, KeyError, TypeError):
                raise LedgerError(f"{path}: the last line is not a ledger record; run audit") from None
            if not isinstance(prev, str):
                raise LedgerError(f"{path}: the last record has no hash; run audit")
        head = read_head(path)
        if head is not None and (head.get("hash") != (prev if last is not None else None)
                                 or not isinstance(head.get("count"), int)):
            raise LedgerError(
                f"{path}: the ledger ends with {prev[:12]} but its head file says {str(head.get('hash'))[:12]} "
                f"after {head.get('count')} records; records were removed or rewritten; run audit"
            )
        count = (head["count"] if head is not None else _count_lines(path)) + 1
        stored = seal(record, prev)
        line = (canonical_json(stored) + "\n").encode("utf-8")
        _append_line(path, line, lambda: _write_head(path, count, stored["hash"]))
        return stored


def _append_line(path: Path, line: bytes, then: Any) -> None:
    """Append `line` whole, or leave the file exactly as it was: write, fsync, read back, then `then()`
    (the head file); any failure truncates back to the size before and raises one LedgerError line."""
    existed = path.exists()
    try:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as exc:
        raise LedgerError(f"{path}: cannot open the ledger to append ({exc.strerror}); "
                          "the ledger is unchanged") from None
    try:
        size = os.fstat(fd).st_size
        try:
            written = os.write(fd, line)
            if written != len(line):
                raise OSError(errno.ENOSPC, f"short write, {written} of {len(line)} bytes")
            os.fsync(fd)
            if os.pread(fd, len(line), size) != line:
                raise OSError(errno.EIO, "the appended line does not read back as written")
            then()
        except OSError as exc:
            why = exc.strerror or str(exc)
            try:
                os.ftruncate(fd, size)
                if not existed:  # it did not exist before: leave none
                    os.unlink(path)
            except OSError as undo:  # nothing more can be done here: say exactly what is left
                raise LedgerError(f"{path}: cannot append a record ({why}), and truncating it back to "
                                  f"{size} bytes failed too ({undo.strerror}); run audit") from None
            try:
                os.fsync(fd)
            except OSError:  # the size is right; only its durability is in doubt, as before the append
                pass
            raise LedgerError(f"{path}: cannot append a record ({why}); the ledger is unchanged") from None
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- verifying


def _name(obj: dict[str, Any] | None) -> str | None:
    if not obj:
        return None
    h = obj.get("hypothesis")
    return h.get("name") if isinstance(h, dict) else None


def verify_chain(path: str | Path = DEFAULT_LEDGER) -> list[Problem]:
    """Every break in the chain: edited, removed, reordered, malformed or truncated records."""
    path = Path(path)
    problems: list[Problem] = []
    with open(path, "rb") as f:
        data = f.read()
    raw_lines = data.split(b"\n")
    torn = raw_lines[-1] != b""  # no newline at the end: the last line was cut
    if not torn:
        raw_lines.pop()
    prev_hash: str | None = GENESIS  # None once the previous line could not be read
    last_hash: str | None = None
    for n, raw in enumerate(raw_lines, start=1):
        try:
            obj = json.loads(raw.decode("utf-8"))
        except ValueError:
            obj = None
        if torn and n == len(raw_lines):
            problems.append(Problem(n, None, _name(obj if isinstance(obj, dict) else None), "truncated",
                                    "the last line is incomplete: the file was cut or a write was torn; "
                                    + repair_hint(path, len(data) - len(raw))))
            if not isinstance(obj, dict):
                break
        if not isinstance(obj, dict):
            problems.append(Problem(n, None, None, "malformed", "not a JSON record"))
            prev_hash = last_hash = None
            continue
        stored, name, actual = obj.get("hash"), _name(obj), record_hash(obj)
        if stored != actual:
            problems.append(Problem(n, stored if isinstance(stored, str) else actual, name, "edited",
                                    f"content does not match its hash (stored {str(stored)[:12]}, "
                                    f"recomputed {actual[:12]}): the record was changed after it was written"))
        if prev_hash is not None and obj.get("prev_hash") != prev_hash:
            what = ("the first record does not start the chain: records before it were removed"
                    if prev_hash == GENESIS else
                    "prev_hash does not point at the record before it: a record was removed, inserted or moved here")
            problems.append(Problem(n, stored if isinstance(stored, str) else None, name, "chain", what))
        prev_hash = last_hash = stored if isinstance(stored, str) else None
    count = len(raw_lines)
    head = read_head(path)
    if head is not None:
        if head.get("error"):
            problems.append(Problem(None, None, None, "head", head["error"]))
        elif head.get("count") != count or head.get("hash") != last_hash:
            problems.append(Problem(count or None, last_hash, None, "head",
                                    f"the ledger has {count} lines ending with {str(last_hash)[:12]} but its head file "
                                    f"records {head.get('count')} ending with {str(head.get('hash'))[:12]}: "
                                    "records were removed from the end, or the ledger or its head was rewritten"))
    return problems


def repair_hint(path: str | Path, keep: int) -> str:
    """How to cut a torn last line off: the whole records before it stay, and its run can record it again."""
    return (f"to repair it, cut the ledger back to its last whole record: `truncate -s {keep} {path}` "
            f"(keep a copy first); the torn record's run directory still holds its trials, and "
            f"`run resume=DIR` records its verdict again")


def head_of(path: str | Path) -> tuple[int, str | None]:
    """(number of lines, hash of the last record): the value worth noting outside the ledger."""
    last, _ = _last_line(Path(path))
    n = _count_lines(Path(path))
    try:
        return n, json.loads(last)["hash"] if last is not None else None
    except (ValueError, KeyError, TypeError):
        return n, None
