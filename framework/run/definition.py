"""A run directory's launches belong to one definition: the definition in force for a run, and the check
`resume=` makes before it reuses a launch.

A launch is reused only when its row names the definition in force (framework.core.definition), or when it is
carried over by name (`resume_carry=[ID,...]`, which needs `allow_amend=true`: the amendment in the ledger
and the verdict record list the launches). A row from before definitions is reused only when the run's own
verdict record, or the registration in force when the launch started, names the hypothesis file as it is now.
Anything else is refused before a server starts: the verdict must not rest on launches that never ran it.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from omegaconf import ListConfig

from framework.core import definition as definition_mod
from framework.core.hashing import sha256_file
from framework.core.spec import Design, Experiment
from framework.core.trials import Trials
from framework.errors import ConfigError
from framework.records import ledger, registration
from framework.records.trials import read_json_object, read_trials
from framework.run import confirmation
from framework.run.writer import completed_launches


def in_force(hypothesis_path: Path, experiment: Experiment, design: Design) -> dict[str, str]:
    """The definition the launches of this run are measured under."""
    profile = Path(experiment.sim.profile)
    profile_sha = sha256_file(profile) if profile.suffix in (".yaml", ".yml", ".json") and profile.is_file() else None
    return definition_mod.definition(sha256_file(hypothesis_path), experiment.model_dump(mode="json"),
                                     design.model_dump(mode="json"), profile_sha)


def carried(value: Any) -> set[str]:
    """`resume_carry=`: launch ids (`c1-r0-a1`, or `c1-r0` for every attempt) to carry over whatever their
    definition."""
    if value is None or value == "":
        return set()
    if isinstance(value, (list, tuple, ListConfig)):
        return {str(v) for v in value}
    return {str(value)}


def _carries(launch_id: str, carry: set[str]) -> bool:
    return launch_id in carry or launch_id.rpartition("-a")[0] in carry


def _when(value: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


def _proven(run_dir: Path, rows: list[dict[str, Any]], hypothesis_sha: str, name: str, ledger_path: Path) -> bool:
    """Whether launches without a definition ran the hypothesis file as it is now: the run's own verdict
    record says so, or the registration (or amendment) of `name` in force when the first of them started does."""
    rec = read_json_object(run_dir / "verdict.json")
    if rec is not None and ledger.is_kind(rec, "verdict"):
        return (rec.get("hypothesis") or {}).get("sha256") == hypothesis_sha
    starts = [t for r in Trials(rows).of_kind("launch") if not r.get("definition")
              if (t := _when(r.get("started"))) is not None]
    if not starts or not ledger_path.is_file():
        return False
    first = min(starts)
    reg, amendments = registration.find_registration(ledger_path, name)
    chain = [r for r in ([reg] if reg else []) + amendments
             if (t := _when(r.get("amended") or r.get("registered"))) is not None and t <= first]
    return bool(chain) and (chain[-1].get("hypothesis") or {}).get("sha256") == hypothesis_sha


def check_resume(run_dir: Path, rows: list[dict[str, Any]], definition: dict[str, str], *, name: str,
                 ledger_path: Path, requests_n: int, same_file: bool, carry: set[str] = frozenset()) -> None:
    """Refuse (ConfigError, before any server starts) a resume whose launches were measured under another
    definition than `definition`. `same_file`: resuming into the run's own directory, where every row stays in
    the file (and counts); else only its complete launches would be copied."""
    launches = Trials(rows).of_kind("launch")
    kept = ({str(r["launch_id"]) for r in launches} if same_file else set(completed_launches(rows, requests_n)))
    foreign: dict[str, list[str]] = {}
    unstamped: list[str] = []
    for launch_id, row_def in definition_mod.launch_definitions(launches).items():
        if launch_id not in kept or _carries(launch_id, carry):
            continue
        if not row_def:
            unstamped.append(launch_id)
        elif parts := definition_mod.differs(row_def, definition):
            foreign[launch_id] = parts
    if unstamped and not _proven(run_dir, rows, definition["hypothesis"], name, ledger_path):
        raise ConfigError("command line", "resume", (
            f"{run_dir}: {len(unstamped)} launch(es) ({_ids(unstamped)}) name no definition and neither the run's "
            f"verdict.json nor the registration of {name!r} in force when they started ({ledger_path}) shows they "
            f"ran {name} as it is now; {_safe(run_dir)}"))
    if foreign:
        parts = sorted({p for ps in foreign.values() for p in ps}, key=definition_mod.PARTS.index)
        raise ConfigError("command line", "resume", (
            f"{run_dir}: {len(foreign)} launch(es) ({_ids(list(foreign))}) were measured under another definition "
            f"of {name!r} ({definition_mod.describe(parts)} changed since), and resume reuses only launches of the "
            f"definition in force; {_safe(run_dir)}"))


def _ids(ids: list[str]) -> str:
    ids = sorted(ids)
    return ", ".join(ids[:4]) + (f", ... {len(ids) - 4} more" if len(ids) > 4 else "")


def _safe(run_dir: Path) -> str:
    return (f"run into a fresh directory (leave out resume={run_dir}), or name the launches to carry over with "
            "resume_carry=[ID,...] and allow_amend=true (the amendment and the record list them)")


def vet_resume(dirs: list[Path], definition: dict[str, str], *, name: str, ledger_path: Path, requests_n: int,
               run_dir: Path | None = None, carry: set[str] = frozenset()) -> None:
    """Every check a resume's directories must pass before anything is written or started: their launches
    belong to `definition` (or are carried over), and none of a search's exploration is reused by its
    confirmation. `run_dir`: this run's directory, when known (a resume into it keeps every row)."""
    exploration = confirmation.exploration_of(ledger_path, name)
    for d in dirs:
        trials = d / "trials.jsonl"
        if not trials.is_file():
            continue
        rows = read_trials(trials)
        same_file = run_dir is not None and trials.resolve() == (run_dir / "trials.jsonl").resolve()
        if exploration is not None:
            confirmation.check_fresh(ledger_path, exploration, d, rows, requests_n, name)
        check_resume(d, rows, definition, name=name, ledger_path=ledger_path, requests_n=requests_n,
                     same_file=same_file, carry=carry)
