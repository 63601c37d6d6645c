"""Who appends a sweep job's records to the ledger: the job itself, or the process that submitted the sweep.

A file lock on a shared (network) filesystem is not reliable, so a job that runs on another node
(SLURM through submitit, or any launcher other than Hydra's in-process BasicLauncher) never writes
the ledger. The submitting process registers every job's hypothesis before the jobs start
(:func:`register_jobs`, from the sweep callback's ``on_multirun_start``); each job finds its
registration read-only (:func:`framework.records.registration.in_force`), measures, and returns
its verdict record in its directory as ``ledger_pending.json`` (the record not yet chained, and the
ledger it belongs to); the submitting process appends them in job order (:func:`record_pending`)
and replaces each job's ``verdict.json`` with the record as stored. A job that is still pending
(the submitter was killed, or its disk was full) is recorded by ``run resume=JOB_DIR``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable

from omegaconf import DictConfig, OmegaConf

from framework.errors import LedgerError
from framework.records import ledger
from framework.records.trials import read_json_object

PENDING = "ledger_pending.json"
IN_PROCESS_LAUNCHER = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"


def submitter_appends(hydra_cfg: Any) -> bool:
    """Whether a multirun's jobs leave their records to the submitting process (any launcher but Hydra's
    in-process one: their jobs run in other processes, perhaps on other nodes)."""
    if hydra_cfg is None or not str(OmegaConf.select(hydra_cfg, "mode", default="")).endswith("MULTIRUN"):
        return False
    target = str(OmegaConf.select(hydra_cfg, "launcher._target_", default="") or "")
    return bool(target) and target != IN_PROCESS_LAUNCHER


def write_pending(run_dir: Path, ledger_path: Path, record: dict[str, Any]) -> Path:
    """The job's side: its record and ledger, for the submitting process to append."""
    path = run_dir / PENDING
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"ledger": str(ledger_path.resolve()), "record": record}) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def pending_dirs(sweep_dir: Path) -> list[Path]:
    """Job directories under `sweep_dir` whose record is not in the ledger yet, in job-number order."""
    def number(p: Path) -> tuple[int, str]:
        head = p.name.split("-", 1)[0]
        return (int(head), p.name) if head.isdigit() else (1 << 30, p.name)

    found = [p.parent for p in sweep_dir.rglob(PENDING) if ".submitit" not in p.relative_to(sweep_dir).parts]
    return sorted(found, key=number)


def record_pending(job_dirs: Iterable[Path], console: Any = None) -> list[str]:
    """The submitter's side: append each job's pending record to its ledger, write its `verdict.json` as
    stored; returns one line per job that could not be recorded (the pending file stays)."""
    from framework.present.report import summary_markdown, write_report

    problems: list[str] = []
    for job_dir in job_dirs:
        pending = read_json_object(job_dir / PENDING)
        if pending is None or not isinstance(pending.get("record"), dict):
            problems.append(f"{job_dir / PENDING}: not a pending record; run resume={job_dir} to record it")
            continue
        try:
            stored = ledger.append(pending["ledger"], pending["record"])
        except LedgerError as exc:
            problems.append(f"{exc}; job {job_dir.name} is not recorded: free space and run resume={job_dir}")
            continue
        try:
            (job_dir / "verdict.json").write_text(json.dumps(stored, indent=2) + "\n", encoding="utf-8")
            (job_dir / "summary.md").write_text(summary_markdown(stored), encoding="utf-8")
            (job_dir / PENDING).unlink()
        except OSError as exc:
            problems.append(f"{job_dir}: recorded in {pending['ledger']} as {stored['hash'][:12]}, but verdict.json "
                            f"could not be rewritten ({exc.strerror})")
            continue
        if (job_dir / "report.html").exists():
            try:
                write_report(job_dir)
            except Exception:  # noqa: BLE001 - the report is a convenience; the record is safe
                pass
    return problems


def register_jobs(config: DictConfig, overrides: list[list[str]]) -> None:
    """Before a sweep's jobs start: register (or pass, or amend with allow_amend) each job's hypothesis in its
    ledger, as the job would itself, so registrations precede the data in the chain. UserError on a refusal."""
    from hydra.core.global_hydra import GlobalHydra

    from framework.records import registration
    from framework.records.registration import analysis_settings
    from framework.run.resolve import resolve_config

    loader = GlobalHydra.instance().config_loader()
    cwd = Path(str(OmegaConf.select(config, "hydra.runtime.cwd", default=os.getcwd())))
    done: set[tuple[str, str, str]] = set()
    for job in overrides:
        cfg = loader.load_sweep_config(config, list(job))
        resolved = resolve_config(cfg)
        settings = analysis_settings(resolved.design)
        path = Path(str(cfg.ledger))
        path = path if path.is_absolute() else cwd / path
        key = (str(path.resolve()), str(resolved.hypothesis_path), json.dumps(settings, sort_keys=True))
        if key in done:
            continue
        done.add(key)
        registration.check_or_amend(path, resolved.hypothesis_path, settings, bool(cfg.get("allow_amend")))
