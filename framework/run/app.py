"""The Hydra application behind `python -m framework run`, and what its jobs leave for the exit code.

Hydra composes `framework/conf/` with the command line, makes the run (or sweep job) directory and
calls `hydra_run`. Before Hydra starts anything, `run_command` prechecks every variant of the command
line (:func:`framework.run.resolve.precheck`), so a bad override, a missing file or an invalid field
fails with one clear line and exit code 2 before any server starts. Hydra discards a job's return
value, so what the CLI needs afterwards (runs that measured nothing, the directory `resume=` takes)
is kept in :data:`framework.run.outcomes.OUTCOMES`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import sys
from pathlib import Path
from typing import Any, Iterator

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from framework.core import walltime
from framework.errors import EXIT_BAD_INPUT, EXIT_NO_DATA, EXIT_OK, ConfigError, UserError
from framework.execution.backends import remote_listen_warning
from framework.run.compose import CONF_DIR
from framework.run.outcomes import OUTCOMES
from framework.run.preflight import output_dir_problem
from framework.run.resolve import precheck

INFO_FLAGS = ("--help", "-h", "--hydra-help", "--cfg", "-c", "--info", "-i")


def report_error(exc: Exception) -> int:
    print(f"error: {exc}", file=sys.stderr)
    return EXIT_BAD_INPUT


def run_command(args: list[str]) -> int:
    """`python -m framework run ARGS`: precheck, then Hydra; 0, or 3 when a run measured nothing."""
    if not any(a in INFO_FLAGS or a.startswith("--cfg") for a in args):
        key, root = output_root(args)
        problem = output_dir_problem(root)
        if problem:
            raise ConfigError("command line", key, problem)
        warnings: list[str] = []
        for _, resolved in precheck(args):
            if resolved.wall_time.total_s >= walltime.NOTE_S:  # before a long run, how long it will take at least
                print(f"note: {resolved.hypothesis.name}: {walltime.describe(resolved.wall_time)}", file=sys.stderr)
            remote = remote_listen_warning(resolved.backend)
            if remote is not None and remote not in warnings:  # once, before any server listens
                warnings.append(remote)
                print(remote, file=sys.stderr)
    sys.argv = ["python -m framework run", *args]
    try:
        with _hydra_raises():
            hydra_run()
    except OSError as exc:  # Hydra's own files (the run directory, .hydra/) on a full or read-only disk
        if exc.errno not in STORAGE_ERRNOS:
            raise
        run_dir = _hydra_output_dir(exc)
        if run_dir is not None:
            _remove_if_unused(run_dir)
        print(f"error: {exc.filename or run_dir or 'the run directory'}: cannot write ({exc.strerror}); "
              "nothing was run", file=sys.stderr)
        return EXIT_BAD_INPUT
    if OUTCOMES.unrecorded:  # a sweep job's record did not reach the ledger (each named above, with resume=)
        return EXIT_BAD_INPUT
    return EXIT_NO_DATA if OUTCOMES.no_data else EXIT_OK


def output_root(args: list[str]) -> tuple[str, Path]:
    """The key and the place where Hydra will make this command line's run or sweep directory (its fixed part,
    before any `${...}`)."""
    multirun = "-m" in args or "--multirun" in args
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    given = [a.removeprefix("+").removeprefix(key + "=") for a in args if a.removeprefix("+").startswith(key + "=")]
    path = given[-1] if given else ("multirun" if multirun else "outputs")
    return key, Path(path.split("${", 1)[0] or ".")


STORAGE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EFBIG)


def _hydra_output_dir(exc: BaseException) -> Path | None:
    """The run directory Hydra was making when it failed: `output_dir` in its `run_job` frame, if it got there."""
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name == "run_job" and "output_dir" in frame.f_locals:
            return Path(str(frame.f_locals["output_dir"]))
        tb = tb.tb_next
    return None


@contextlib.contextmanager
def _hydra_raises() -> Iterator[None]:
    """Hydra prints its own traceback for an exception and exits 1 unless HYDRA_FULL_ERROR is set; with it
    set the exception reaches `run_command`, which turns a full disk into one line."""
    before = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = before


@hydra.main(config_path=CONF_DIR, config_name="config", version_base="1.3")
def hydra_run(cfg: DictConfig) -> Any:
    from framework.run.runner import resolve, run

    hydra_cfg = HydraConfig.get()
    runtime = hydra_cfg.runtime
    run_dir = Path(runtime.output_dir)
    multirun = str(hydra_cfg.mode).endswith("MULTIRUN")
    OUTCOMES.resume_dir = str(Path(runtime.cwd, hydra_cfg.sweep.dir) if multirun else run_dir)
    try:
        ctx = resolve(cfg, run_dir, Path(runtime.cwd))
        record = run(ctx)
    except UserError as exc:
        _remove_if_unused(run_dir)
        sys.exit(report_error(exc))
    no_data = (record.get("analysis", {}).get("details") or {}).get("no_data")
    if no_data:
        causes = "; ".join(no_data.values())
        print(f"error: no data: {causes}; the verdict is recorded as inconclusive ({run_dir})", file=sys.stderr)
        OUTCOMES.no_data.append(str(run_dir))
    return record["verdict"]


def _remove_if_unused(run_dir: Path) -> None:
    """A refused run leaves nothing behind: drop the directory Hydra made if it holds only Hydra's files."""
    try:
        entries = list(run_dir.iterdir())
    except OSError:
        return
    if not all(e.name == ".hydra" or (e.is_file() and e.suffix == ".log") for e in entries):
        return
    shutil.rmtree(run_dir, ignore_errors=True)
    cwd = Path.cwd().resolve()
    parent = run_dir.resolve().parent
    while parent != cwd and cwd in parent.parents:  # outputs/DATE/ and outputs/ when they are now empty
        try:
            parent.rmdir()
        except OSError:
            break
        parent = parent.parent
