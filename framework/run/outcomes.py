"""What this process's runs leave for the CLI: Hydra discards a job's return value, so the runs that
measured nothing (exit 3) and the directory `resume=` takes are kept in one object here."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Outcomes:
    no_data: list[str] = field(default_factory=list)  # run directories (or sweep jobs) that measured nothing
    resume_dir: str = ""  # what `resume=` takes for the run or sweep now running
    unrecorded: list[str] = field(default_factory=list)  # sweep jobs whose records the submitter could not append


OUTCOMES = Outcomes()
