"""What one run carries from its resolved config to its record."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from framework.core.spec import Design, Experiment, Hypothesis
from framework.execution.backends import BackendSettings
from framework.run.redaction import Redactor


@dataclass
class RunContext:
    hypothesis: Hypothesis
    hypothesis_path: Path
    experiment: Experiment
    backend: BackendSettings
    design: Design
    ledger: Path
    run_dir: Path
    config: dict[str, Any]
    resume: Path | None = None
    resume_also: list[Path] = field(default_factory=list)  # `resume=[A,B,...]`: more run directories to reuse
    allow_amend: bool = False
    sim_coverage: dict[str, Any] | None = None  # what the sim does not model here (backend=sim only)
    progress: bool = True
    report: bool = True
    client_workers: int | str = 1  # `client.workers` (framework.execution.client.workers.worker_count per launch)
    ledger_writer: str = "job"  # "submitter": a sweep job on another process or node leaves it (run.handoff)
    extra: dict[str, Any] = field(default_factory=dict)
    machine: dict[str, Any] = field(default_factory=dict)  # this process's machine (framework.core.machine.identity)
    machine_slot: int | None = None  # run only the blocks of this slot of design.machines (None: all)
    definition: dict[str, str] | None = None  # what its launches are measured under (framework.run.definition)
    redactor: Redactor = field(default_factory=Redactor)
