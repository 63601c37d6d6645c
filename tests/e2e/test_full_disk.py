"""A full disk at each write of a run: before it starts, under the trials file and under the verdict's
ledger append. Each ends in one line naming what to do (`resume=DIR`), leaves no torn
line in the ledger or the trials file, and `audit` passes afterwards; a resume then records the verdict.

The disk is a small tmpfs mounted for the test (needs root; skipped with the reason when mounting is not
permitted) and always unmounted. It carries the `faults` marker: `.ci/run` runs it with `pytest -m faults`.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Iterator

import pytest
from cli_helpers import ROOT, framework, ledger_records, no_servers_left, starts_hypothesis

pytestmark = pytest.mark.faults

PAGE = 4096
RUN = ("hypothesis=one", "design.launches=1", "design.requests=1", "design.warmup=0", "design.sequential=false",
       "report=false", "progress=false")


@contextlib.contextmanager
def tmpfs(where: Path, size_kib: int = 256) -> Iterator[Path]:
    where.mkdir(parents=True)
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(where)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip() or proc.returncode}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(disk: Path, leave: int) -> Path:
    """Fill `disk` until `leave` bytes (whole pages) are free; the filler is removed to free it again."""
    st = os.statvfs(disk)
    free = st.f_bavail * st.f_frsize
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as f:
        try:
            f.write(b"\0" * max(0, free - leave))
        except OSError as exc:  # a run writing beside it took some of that room first: the disk is full anyway
            if exc.errno != errno.ENOSPC:
                raise
    return filler


def whole_lines(path: Path) -> list[dict]:
    data = path.read_bytes()
    assert data == b"" or data.endswith(b"\n"), f"{path} ends in a torn line"
    return [json.loads(line) for line in data.decode().splitlines()]


def audit_passes(ledger: Path, cwd: Path) -> None:
    out = framework("audit", f"ledger={ledger}", cwd=cwd, timeout=300)
    assert out.returncode == 0 and "audit passed" in out.stdout, out.stdout[-3000:] + out.stderr[-2000:]


def one_line_error(out: subprocess.CompletedProcess) -> str:
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert out.returncode == 2 and len(errors) == 1 and "Traceback" not in out.stderr, out.stderr[-4000:]
    return errors[0]


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "experiments", tmp_path / "experiments")
    (tmp_path / "hypotheses").mkdir()
    (tmp_path / "hypotheses" / "one.yaml").write_text(
        starts_hypothesis("one", "The simulated server starts and serves.", "rtx_pro_6000_tp8", 1, 1))
    return tmp_path


def test_a_disk_full_before_the_run_is_one_line_and_leaves_nothing(workdir: Path) -> None:
    with tmpfs(workdir / "disk") as disk:
        fill(disk, 0)
        out = framework("run", *RUN, f"ledger={disk / 'v.jsonl'}", cwd=workdir)
        assert "No space left on device" in one_line_error(out)
        assert not (workdir / "outputs").exists() and not (disk / "v.jsonl").exists()
        out = framework("run", *RUN, f"hydra.run.dir={disk / 'run'}", cwd=workdir)
        line = one_line_error(out)  # Hydra's own error on the full disk, or the preflight's look at its free space
        assert "cannot write (No space left on device); nothing was run" in line or " is full " in line, line
        assert not (disk / "run").exists() and not (workdir / "verdicts.jsonl").exists()
    assert no_servers_left(workdir)


def test_a_disk_full_under_the_trials_file_says_where_to_resume(workdir: Path) -> None:
    import sys
    import time

    from cli_helpers import run_env

    ledger = workdir / "verdicts.jsonl"
    with tmpfs(workdir / "disk", 2048) as disk:  # room enough for the preflight's look at the run directory
        run_dir = disk / "run"
        proc = subprocess.Popen([sys.executable, "-m", "framework", "run", *RUN, f"hydra.run.dir={run_dir}"],
                                cwd=workdir, env=run_env(workdir), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        deadline = time.monotonic() + 120
        while not (run_dir / "trials.jsonl").exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.02)
        filler = fill(disk, 0)  # the environment row is written; the server's description is not yet
        stdout, stderr = proc.communicate(timeout=300)
        out = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
        line = one_line_error(out)
        assert "trials.jsonl: cannot write a trial row" in line and f"resume={run_dir}" in line, line
        rows = whole_lines(run_dir / "trials.jsonl")
        assert all(r.get("kind") for r in rows)
        assert [r["kind"] for r in ledger_records(ledger)] == ["registration"]
        audit_passes(ledger, workdir)
        filler.unlink()
        again = framework("run", *RUN, f"resume={run_dir}", f"hydra.run.dir={workdir / 'run2'}", cwd=workdir)
        assert again.returncode == 0, again.stderr[-3000:]
    assert [r["kind"] for r in ledger_records(ledger)] == ["registration", "verdict"]
    audit_passes(ledger, workdir)
    assert no_servers_left(workdir)


def test_a_disk_full_under_the_verdict_leaves_the_ledger_whole_and_keeps_verdict_json(workdir: Path) -> None:
    run_dir = workdir / "run"
    with tmpfs(workdir / "disk") as disk:
        ledger = disk / "v.jsonl"
        filler = fill(disk, 3 * PAGE)  # the registration and its head; not the verdict record (~20 KB)
        out = framework("run", *RUN, f"ledger={ledger}", f"hydra.run.dir={run_dir}", cwd=workdir)
        line = one_line_error(out)
        assert "v.jsonl: cannot append a record (" in line and "); the ledger is unchanged" in line, line
        assert f"resume={run_dir}" in line and "verdict.json" in line, line
        kept = json.loads((run_dir / "verdict.json").read_text())
        assert kept["kind"] == "verdict" and kept.get("hash") is None  # not in the ledger, and resume knows it
        assert [r["kind"] for r in whole_lines(ledger)] == ["registration"]
        audit_passes(ledger, workdir)
        filler.unlink()
        again = framework("run", *RUN, f"ledger={ledger}", f"resume={run_dir}",
                          f"hydra.run.dir={workdir / 'run2'}", cwd=workdir)
        assert again.returncode == 0, again.stderr[-3000:]
        records = whole_lines(ledger)
        assert [r["kind"] for r in records] == ["registration", "verdict"]
        assert records[1]["analysis"]["extension"] is None  # the unrecorded verdict was not taken as a previous one
        audit_passes(ledger, workdir)
    assert no_servers_left(workdir)
