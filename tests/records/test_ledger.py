"""The ledger: hash chain, head file, tamper detection and concurrent appends."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from framework.errors import LedgerError
from framework.records import ledger
from framework.records.ledger import GENESIS


def _fill(path: Path, n: int) -> list[dict]:
    return [ledger.append(path, {"kind": "note", "hypothesis": {"name": f"h{i % 2}"}, "i": i, "x": i / 3})
            for i in range(n)]


def _kinds(problems: list[ledger.Problem]) -> set[str]:
    return {p.kind for p in problems}


def test_append_chains_and_hashes(tmp_path: Path) -> None:
    path = tmp_path / "v.jsonl"
    recs = _fill(path, 3)
    assert recs[0]["prev_hash"] == GENESIS
    assert [r["prev_hash"] for r in recs[1:]] == [r["hash"] for r in recs[:-1]]
    assert all(ledger.record_hash(r) == r["hash"] for r in recs)
    assert list(ledger.read(path)) == recs
    assert ledger.verify_chain(path) == []
    assert json.loads((tmp_path / "v.jsonl.head").read_text()) == {"count": 3, "hash": recs[-1]["hash"]}
    assert ledger.head_of(path) == (3, recs[-1]["hash"])


def test_pydantic_records_and_non_finite_floats(tmp_path: Path) -> None:
    from framework.records.models import HypothesisRef

    path = tmp_path / "v.jsonl"
    stored = ledger.append(path, HypothesisRef(name="n", sha256="s", statement="t"))
    assert stored["name"] == "n"
    stored = ledger.append(path, {"v": float("nan"), "w": [float("inf")]})
    assert stored["v"] is None and stored["w"] == [None]
    assert ledger.verify_chain(path) == []


def test_edited_number_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "v.jsonl"
    recs = _fill(path, 4)
    lines = path.read_text().splitlines(keepends=True)
    lines[1] = lines[1].replace('"x":0.3333333333333333', '"x":0.5')
    path.write_text("".join(lines))
    problems = ledger.verify_chain(path)
    assert [(p.line, p.kind) for p in problems] == [(2, "edited")]
    assert problems[0].hash == recs[1]["hash"] and "h1" in str(problems[0])


def test_edit_with_rehash_breaks_the_next_link(tmp_path: Path) -> None:
    path = tmp_path / "v.jsonl"
    _fill(path, 4)
    lines = path.read_text().splitlines()
    rec = json.loads(lines[1])
    rec["x"] = 99.0
    lines[1] = ledger.canonical_json(ledger.seal(rec, rec["prev_hash"]))
    path.write_text("\n".join(lines) + "\n")
    assert [(p.line, p.kind) for p in ledger.verify_chain(path)] == [(3, "chain")]


def test_deleted_line_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "v.jsonl"
    _fill(path, 4)
    lines = path.read_text().splitlines(keepends=True)
    del lines[1]
    path.write_text("".join(lines))
    kinds = {(p.line, p.kind) for p in ledger.verify_chain(path)}
    assert (2, "chain") in kinds and (3, "head") in kinds


def test_deleted_first_line_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "v.jsonl"
    _fill(path, 3)
    path.write_text("".join(path.read_text().splitlines(keepends=True)[1:]))
    assert (1, "chain") in {(p.line, p.kind) for p in ledger.verify_chain(path)}


def test_swapped_lines_are_detected(tmp_path: Path) -> None:
    path = tmp_path / "v.jsonl"
    recs = _fill(path, 4)
    lines = path.read_text().splitlines(keepends=True)
    lines[1], lines[2] = lines[2], lines[1]
    path.write_text("".join(lines))
    problems = ledger.verify_chain(path)
    assert {p.line for p in problems if p.kind == "chain"} == {2, 3, 4}
    assert problems[0].hash == recs[2]["hash"]


def test_truncated_file_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "v.jsonl"
    _fill(path, 3)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 20])
    assert (3, "truncated") in {(p.line, p.kind) for p in ledger.verify_chain(path)}
    with pytest.raises(LedgerError, match="incomplete"):
        ledger.append(path, {"i": 99})


def test_removed_last_lines_are_caught_by_the_head(tmp_path: Path) -> None:
    path = tmp_path / "v.jsonl"
    _fill(path, 4)
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:2]))
    problems = ledger.verify_chain(path)
    assert [(p.line, p.kind) for p in problems] == [(2, "head")]
    assert "4" in problems[0].message
    with pytest.raises(LedgerError, match="head"):
        ledger.append(path, {"i": 99})  # chaining on would overwrite the evidence


def test_ledger_without_head_still_appends(tmp_path: Path) -> None:
    path = tmp_path / "v.jsonl"
    _fill(path, 2)
    (tmp_path / "v.jsonl.head").unlink()
    ledger.append(path, {"i": 2})
    assert ledger.verify_chain(path) == []
    assert ledger.read_head(path)["count"] == 3


def test_malformed_line_is_named(tmp_path: Path) -> None:
    path = tmp_path / "v.jsonl"
    _fill(path, 3)
    lines = path.read_text().splitlines(keepends=True)
    lines.insert(1, "garbage\n")
    path.write_text("".join(lines))
    kinds = {(p.line, p.kind) for p in ledger.verify_chain(path)}
    assert (2, "malformed") in kinds


def _writer(path: str, who: int, n: int) -> None:
    for i in range(n):
        ledger.append(path, {"kind": "note", "writer": who, "i": i, "pad": "x" * (who * 500)})


def test_four_processes_append_concurrently(tmp_path: Path) -> None:
    path = tmp_path / "v.jsonl"
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(path), w, 50)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    recs = list(ledger.read(path))
    assert len(recs) == 200
    assert sorted((r["writer"], r["i"]) for r in recs) == [(w, i) for w in range(4) for i in range(50)]
    assert ledger.verify_chain(path) == []
    assert ledger.read_head(path)["count"] == 200


@settings(max_examples=40, deadline=None)
@given(
    st.dictionaries(
        st.text(min_size=1, max_size=8),
        st.one_of(
            st.none(),
            st.booleans(),
            st.integers(),
            st.floats(allow_nan=False, allow_infinity=False),
            st.text(max_size=20),
        ),
        max_size=6,
    )
)
def test_hash_is_independent_of_key_order(record: dict) -> None:
    reordered = dict(reversed(list(record.items())))
    assert ledger.record_hash(record) == ledger.record_hash(reordered)
    sealed = ledger.seal(record, GENESIS)
    assert ledger.record_hash(json.loads(ledger.canonical_json(sealed))) == sealed["hash"]


def test_a_ledger_that_cannot_be_locked_fails_at_once_naming_the_lock(tmp_path: Path) -> None:
    with pytest.raises(LedgerError, match=r"cannot create the ledger's lock file /proc/version.lock"):
        ledger.append("/proc/version", {"kind": "verdict"})  # hung forever before
    with pytest.raises(LedgerError, match="is a directory"):
        ledger.append(tmp_path, {"kind": "verdict"})


def test_a_lock_held_too_long_times_out_with_a_clear_error(tmp_path: Path, monkeypatch) -> None:
    from filelock import FileLock

    path = tmp_path / "v.jsonl"
    monkeypatch.setattr(ledger, "LOCK_TIMEOUT_S", 0.2)
    holder = FileLock(f"{path}.lock")  # another process's lock (a second flock on the file in this one)
    holder.acquire()
    try:
        ctx = multiprocessing.get_context("fork")
        proc = ctx.Process(target=_append_expecting_timeout, args=(str(path),))
        proc.start()
        proc.join(30)
        assert proc.exitcode == 0
    finally:
        holder.release()


def _append_expecting_timeout(path: str) -> None:
    ledger.LOCK_TIMEOUT_S = 0.2
    try:
        ledger.append(path, {"kind": "verdict"})
    except LedgerError as exc:
        raise SystemExit(0 if "held the ledger lock for more than 0.2 s" in str(exc) else 1) from None
    raise SystemExit(2)


def _state(path: Path) -> tuple[bytes, bytes]:
    return path.read_bytes(), Path(str(path) + ".head").read_bytes()


def test_a_short_write_leaves_the_ledger_exactly_as_it_was(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "v.jsonl"
    _fill(path, 2)
    before = _state(path)
    real_write = ledger.os.write
    monkeypatch.setattr(ledger.os, "write", lambda fd, data: real_write(fd, data[: len(data) // 3]))
    with pytest.raises(LedgerError, match="short write, .*the ledger is unchanged"):
        ledger.append(path, {"kind": "note", "i": 99})
    monkeypatch.undo()
    assert _state(path) == before and ledger.verify_chain(path) == []
    ledger.append(path, {"kind": "note", "i": 3})  # and the next append chains on as usual
    assert ledger.verify_chain(path) == [] and ledger.head_of(path)[0] == 3


def test_a_failed_head_update_takes_the_line_back(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "v.jsonl"
    _fill(path, 2)
    before = _state(path)

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ledger.os, "replace", full)
    with pytest.raises(LedgerError, match="No space left on device.*the ledger is unchanged"):
        ledger.append(path, {"kind": "note", "i": 99})
    monkeypatch.undo()
    assert _state(path) == before and not list(tmp_path.glob("*.tmp"))


def test_a_failed_first_append_leaves_no_ledger(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "v.jsonl"
    monkeypatch.setattr(ledger.os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(122, "Disk quota exceeded")))
    with pytest.raises(LedgerError, match="Disk quota exceeded"):
        ledger.append(path, {"kind": "note"})
    assert not path.exists()


def test_a_torn_last_line_from_an_older_version_is_named_with_its_repair(tmp_path: Path) -> None:
    import subprocess

    path = tmp_path / "v.jsonl"
    _fill(path, 2)
    whole = path.stat().st_size
    with open(path, "ab") as f:  # what 0.1's short write left: part of a line, the head file not updated
        f.write(b'{"kind":"verdict","hypothesis":{"name":"h0"},"x":')
    problems = ledger.verify_chain(path)
    torn = [p for p in problems if p.kind == "truncated"]
    assert torn and f"truncate -s {whole} {path}" in torn[0].message and "resume=DIR" in torn[0].message
    with pytest.raises(LedgerError, match="says how to repair it"):
        ledger.append(path, {"kind": "note"})
    subprocess.run(["truncate", "-s", str(whole), str(path)], check=True)  # the repair it names
    assert ledger.verify_chain(path) == []
