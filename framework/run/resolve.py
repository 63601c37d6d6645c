"""One resolver: a composed config -> everything a run needs, checked before any server starts.

`resolve_config` is the only place the config becomes a hypothesis, an experiment, a backend and an
effective design; `precheck` runs it over every variant of a command line (a sweep's too) before Hydra
starts a job, and the run calls it once more for its own job. Every failure is a `UserError` naming
the file or key, the field and what is allowed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from pydantic import ValidationError

from framework.analysis.bisect import version_hypothesis
from framework.analysis.planning import anytime_cap, anytime_launch_floor
from framework.analysis.search import confirm_hypothesis, grid_hypothesis
from framework.assets.model_path import resolve_model_path
from framework.core import walltime
from framework.core.spec import (
    TYPICAL_NOT_ANYTIME,
    Design,
    Experiment,
    Hypothesis,
    load_experiment,
    load_hypothesis,
    validate_model,
)
from framework.core.trials import Trials
from framework.errors import BackendConfigError, ConfigError, SpecError
from framework.execution import adapters
from framework.execution.backends import Backend, BackendSettings
from framework.execution.backends import check as check_backend
from framework.execution.client.workers import parse_workers
from framework.records import ledger
from framework.records.trials import read_trials
from framework.run import definition as run_definition
from framework.run.compose import compose, sweep_variants
from framework.run.preflight import backend_fits, backend_settings, check_pair, size_problems
from framework.run.redaction import literal_secret
from framework.stats.sequential import sequential_cap


@dataclass(frozen=True)
class Resolved:
    """A config made into checked values (no run directory, no ledger yet)."""

    hypothesis: Hypothesis
    hypothesis_path: Path
    experiment: Experiment
    backend: BackendSettings
    design: Design
    coverage: dict[str, Any] | None  # what the simulator does not model here (simulated backends only)
    wall_time: walltime.WallTime  # the floor of its wall time (open-loop schedules), printed before a long run
    client_workers: int | str = 1  # `client.workers`: N or auto (framework.execution.client.workers)
    grid: Hypothesis | None = None  # a search: every point of its space as a condition (what it launches)
    budget_declared: int | None = None  # a search whose budget was above what its space can use: the file's budget


def project_root() -> Path | None:
    """The checkout the package runs from, or None for an installed package (site-packages is no project)."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").is_file() else None


def search_dirs(kind_dir: str) -> list[Path]:
    """Where `kind_dir` is looked up: the working directory, then the checkout (when there is one)."""
    root = project_root()
    return [Path(kind_dir)] + ([root / kind_dir] if root is not None else [])


def find_file(kind_dir: str, name: str, suffix: str = ".yaml") -> Path:
    """A name in the configured directory (relative to the working directory, else the checkout)."""
    candidate = Path(name)
    if candidate.suffix in (".yaml", ".yml") and candidate.exists():
        return candidate
    for base in search_dirs(kind_dir):
        path = base / f"{name}{suffix}"
        if path.exists():
            return path
    return Path(kind_dir) / f"{name}{suffix}"


def available(kind_dir: str) -> list[str]:
    for base in search_dirs(kind_dir):
        if base.is_dir():
            return sorted(p.stem for p in base.glob("*.yaml"))
    return []


def load_pair(cfg: DictConfig | dict[str, Any]) -> tuple[Hypothesis, Path, Experiment]:
    name = cfg["hypothesis"]
    hyp_dir, exp_dir = cfg["paths"]["hypotheses"], cfg["paths"]["experiments"]
    h_path = find_file(hyp_dir, str(name))
    if not h_path.exists():
        raise ConfigError("command line", "hypothesis", f"no hypothesis {name!r}; available: {available(hyp_dir)}")
    h = load_hypothesis(h_path)
    e_path = find_file(exp_dir, h.experiment)
    if not e_path.exists():
        raise SpecError(h_path, "experiment",
                        f"no experiment {h.experiment!r} in {exp_dir}/; available: {available(exp_dir)}")
    exp = load_experiment(e_path)
    # a named asset (`asset:smollm2`) becomes its verified file, before anything starts
    exp = exp.model_copy(update={"model_path": resolve_model_path(exp.model_path, e_path)})
    check_pair(h, h_path, exp)  # every level's workload, env and python, before anything starts
    return h, h_path, exp

def effective_design(base: Design, overrides: dict[str, Any], h: Hypothesis | None = None) -> Design:
    """The hypothesis's design with the command line's non-null `design.*` values on top.

    A sequential design without `max_launches` gets the cap derived from `launches`: the
    group-sequential one, or under `analysis: anytime` the anytime rule's, raised to the launches
    its launch-outcome predictions (of `h`) need to be decided at all (docs/statistics.md, sections
    5 and 10, "The cap"), so the record always states the cap the run used.
    """
    data = base.model_dump()
    seq = dict(data["sequential"])
    for key, value in overrides.items():
        if value is None:
            continue
        if key == "sequential":
            seq["enabled"] = value
        elif key in ("block", "max_launches"):
            seq[key] = value
        else:
            data[key] = value
    data["sequential"] = seq
    try:
        d = Design.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise ConfigError("command line", f"design.{loc}", f"{err['msg']} (got {err.get('input')!r})") from None
    if d.sequential.enabled and d.sequential.max_launches is None:
        if d.analysis == "anytime":
            cap = anytime_cap(d.launches, d.sequential.block, d.alpha)
            if h is not None:
                cap = max(cap, anytime_launch_floor(h, d.sequential.block, d.alpha))
        else:
            cap = sequential_cap(d.launches, d.sequential.block, d.alpha)
        d = d.model_copy(update={"sequential": d.sequential.model_copy(update={"max_launches": cap})})
    return d


def resolve_config(cfg: DictConfig, *, search: bool = False, bisect: bool = False) -> Resolved:
    """The hypothesis, experiment, backend and effective design of `cfg`, each checked.

    `search=True` (python -m framework search): the hypothesis needs a search block; what is checked and
    launched is its grid (every point of the space as a condition), and the confirmation it will register is
    checked now with the reference in the winner's place. A search has no wall-time floor to refuse (its
    budget, not its grid, says how many launches it makes).
    """
    if OmegaConf.is_missing(cfg, "hypothesis"):
        example = "eagle3_tuning" if search else "eagle3_allreduce"
        raise ConfigError("command line", "hypothesis", f"missing: say which, e.g. hypothesis={example}")
    h, h_path, exp = load_pair(cfg)
    if search and h.search is None:
        raise SpecError(h_path, "search", "no search block: python -m framework search needs one (the space, the "
                                          "goal, the budget and confirm.min_effect); python -m framework run runs "
                                          "a hypothesis without one")
    if bisect and h.bisect is None:
        raise SpecError(h_path, "bisect", "no bisect block: python -m framework bisect needs one (the versions, the "
                                          "threshold); python -m framework run runs a hypothesis without one")
    if not search and not bisect and not h.factors and h.bisect is not None:
        raise SpecError(h_path, "factors", f"{h.name} declares a bisection and no factors: run it with "
                                           f"python -m framework bisect hypothesis={h.name}")
    if not search and not bisect and not h.factors:  # a search-only file: its space and confirmation stand in
        raise SpecError(h_path, "factors", f"{h.name} declares a search and no factors: run it with "
                                           f"python -m framework search hypothesis={h.name}")
    d = effective_design(h.design, OmegaConf.to_container(cfg.design, resolve=True), h)  # type: ignore[arg-type]
    if d.analysis == "anytime" and any(getattr(p, "estimand", "mean") == "typical" for p in h.predictions):
        raise ConfigError("command line", "design.analysis", TYPICAL_NOT_ANYTIME)
    grid, declared = None, None
    if search:
        assert h.search is not None
        capped = h.search.capped()
        declared = h.search.budget.launches if capped is not h.search else None
        h = h.model_copy(update={"design": d, "search": capped})
        grid = grid_hypothesis(h)
        check_pair(grid, h_path, exp)  # every point's merged workload, before anything starts
    if bisect:  # the versions as one factor: what the bisection launches (framework.analysis.bisect)
        h = h.model_copy(update={"design": d})
        grid = version_hypothesis(h)
        check_pair(grid, h_path, exp)
    launched = grid or h
    backend = backend_settings(OmegaConf.to_container(cfg.backend, resolve=True))  # type: ignore[arg-type]
    exp, backend = with_sim_profile(cfg.get("sim_profile"), exp, backend)
    try:
        check_backend(backend, exp)  # its argv template, and whether it takes the experiment's flag names
    except BackendConfigError as exc:
        raise ConfigError("command line", exc.field, exc.message) from None
    backend_fits(backend, launched)
    if (search or bisect) and (cfg.get("machine") or {}).get("slot") is not None:
        raise ConfigError("command line", "machine.slot", "a search chooses each launch from the launches before "
                                                          "it: run it on one machine, without machine.slot")
    if (search or bisect) and resume_dirs(cfg.get("resume")):
        raise ConfigError("command line", "resume", "a search explores on fresh launches and writes a new "
                                                    "directory: it resumes nothing")
    machine_slot(cfg, d)
    sizes = size_problems(launched, exp, d)
    if sizes:
        raise SpecError(h_path, *sizes[0])
    if grid is not None and h.search is not None:
        wall = walltime.estimate_search(grid, exp, d, h.search.budget.launches, backend.time_scale)
        shorten = "lower search.budget.launches"
    elif grid is not None and h.bisect is not None:  # the fewest launches it can make: every probe's first ones
        wall = walltime.estimate_search(grid, exp, d, (h.bisect.probe_budget() + 2) * h.bisect.launches,
                                        backend.time_scale)
        shorten = "lower bisect.launches"
    else:
        wall, shorten = walltime.estimate(h, exp, d, backend.time_scale), "lower design.launches"
    if wall.long and not bool(cfg.get("allow_long", False)):
        raise ConfigError("command line", "allow_long",
                          f"{walltime.describe(wall)}: more than {walltime.duration(walltime.LONG_RUN_S)}; add "
                          f"{walltime.ALLOW_LONG} to run it (or shorten duration_s, {shorten})")
    workers = client_workers(cfg)
    coverage = None
    if backend.simulated:
        sim_cfg = cfg.get("sim") or {}
        coverage = coverage_or_refuse(launched, h_path, exp, backend.table,
                                      allow=bool(sim_cfg.get("allow_unmodelled", False)))
    if search:
        _check_confirmation(h, h_path)
    return Resolved(hypothesis=h, hypothesis_path=h_path, experiment=exp, backend=backend, design=d, coverage=coverage,
                    wall_time=wall, client_workers=workers, grid=grid, budget_declared=declared)


def _check_confirmation(h: Hypothesis, h_path: Path) -> None:
    """The confirmation must be a valid hypothesis whatever wins: checked with the reference in its place."""
    assert h.search is not None
    ref = h.search.reference_point()
    validate_model(Hypothesis, confirm_hypothesis(h, [ref] * h.search.confirm.top, "check", 0), h_path)


def client_workers(cfg: DictConfig) -> int | str:
    """`client.workers`, checked: a whole number of worker processes, or auto."""
    client_cfg = cfg.get("client") or {}
    try:
        return parse_workers(client_cfg.get("workers", 1))
    except ValueError as exc:
        raise ConfigError("command line", "client.workers", str(exc)) from None


ALLOW_UNMODELLED = "sim.allow_unmodelled=true"


def with_sim_profile(profile: str | None, exp: Experiment, backend: BackendSettings,
                     ) -> tuple[Experiment, BackendSettings]:
    """`sim_profile=NAME|PATH` on backend=sim: every condition on that profile; a twin fitted to an engine with
    its own flags (llama.cpp, vLLM) makes the sim take that engine's flag names (docs/model.md, "Twin")."""
    if not profile:
        return exp, backend
    if not backend.simulated:
        raise ConfigError("command line", "sim_profile", f"applies to backend=sim only (backend is {backend.name})")
    path = Path(str(profile))
    name = str(path.resolve()) if path.suffix in (".yaml", ".yml", ".json") or path.exists() else str(profile)
    if path.suffix in (".yaml", ".yml", ".json") and not path.is_file():
        raise ConfigError("command line", "sim_profile", f"{profile}: no such file")
    exp = exp.model_copy(update={"sim": exp.sim.model_copy(update={"profile": name})})
    adapter = adapters.for_row(backend.table) if path.is_file() else None
    if adapter is not None:
        try:
            flags = adapter.profile_engine(path)
        except ValueError as exc:
            raise ConfigError("command line", "sim_profile", f"{profile}: {exc}") from None
        if flags:
            backend = backend.model_copy(update={"flags": flags})
    return exp, backend


def machine_slot(cfg: DictConfig, d: Design) -> int | None:
    """`machine.slot`, checked against the design: a whole number below design.machines, fixed designs only."""
    slot = (cfg.get("machine") or {}).get("slot")
    if slot is None:
        return None
    if isinstance(slot, bool) or not isinstance(slot, int) or not 0 <= slot < d.machines:
        raise ConfigError("command line", "machine.slot",
                          f"a machine slot of design.machines={d.machines}: 0 to {d.machines - 1} (got {slot!r})")
    if d.sequential.enabled:
        raise ConfigError("command line", "machine.slot",
                          "a sequential design looks at all machines' launches together: run it on one machine, "
                          "or spread a fixed design with machine.slot")
    return int(slot)


def coverage_or_refuse(h: Hypothesis, h_path: Path, exp: Experiment, row: Backend, *,
                       allow: bool) -> dict[str, Any] | None:
    """Refuse, before anything starts, a hypothesis whose levels differ in what the simulated backend does not
    model (its adapter's coverage check); with the override, what the record and the verdicts must say."""
    adapter = adapters.for_row(row)
    if adapter is None:
        return None
    cov = adapter.coverage(h, exp)
    if cov["problems"]:
        raise SpecError(h_path, "server_args", f"the SGLang command line does not parse: {cov['problems'][0]}")
    if cov.get("profile_problems"):
        raise SpecError(h_path, "sim_profile", cov["profile_problems"][0])
    if cov.get("unanswerable"):  # no override: the backend has nothing to measure (an outputs prediction on the sim)
        raise SpecError(h_path, *cov["unanswerable"][0])
    refused = cov["refused"]
    if refused and not allow:
        more = f" (and {len(refused) - 1} more)" if len(refused) > 1 else ""
        raise SpecError(h_path, "factors",
                        f"the simulator cannot answer this: {refused[0]}{more}; run it on backend=sglang, or add "
                        f"{ALLOW_UNMODELLED} to run on the sim anyway with every verdict marked not modelled")
    record = {k: v for k, v in cov.items() if k not in ("problems", "refused", "profile_problems", "unanswerable")}
    return {**record, "override": bool(refused)}


def resume_dirs(value: Any) -> list[Path]:
    """`resume=DIR` or `resume=[DIR_A,DIR_B]` (runs of one design on several machines, merged into one record)."""
    if value is None or value == "":
        return []
    if isinstance(value, (list, tuple, ListConfig)):
        return [Path(str(v)) for v in value]
    return [Path(str(value))]


def resume_dir(path: Path, run_dir: Path) -> Path:
    """A run directory, or a sweep directory holding one whose name matches this job's."""
    if (path / "trials.jsonl").exists():
        return path
    candidate = path / run_dir.name
    if (candidate / "trials.jsonl").exists():
        return candidate
    if path.is_dir():
        # Not started in the interrupted sweep: nothing to reuse, run from scratch.
        return candidate
    raise ConfigError("command line", "resume", f"{path} is not a run directory (no trials.jsonl)")


def precheck(overrides: list[str], *, search: bool = False, bisect: bool = False,
             ) -> list[tuple[DictConfig, Resolved]]:
    """Raise a UserError for anything that would make the run (every job of a sweep) fail before measuring;
    else each variant's config and what it resolved to (one, without a sweep)."""
    secret = literal_secret(overrides)
    if secret:
        raise ConfigError("command line", *secret)
    checked = []
    for variant in sweep_variants([o for o in overrides if not o.startswith("-")]):
        cfg = compose(variant)
        resolved = resolve_config(cfg, search=search, bisect=bisect)
        checked.append((cfg, resolved))
        dirs = resume_dirs(cfg.get("resume"))
        for resume in dirs:
            if not resume.exists():
                raise ConfigError("command line", "resume", f"{resume} does not exist; give a run or sweep directory")
            for trials in [resume / "trials.jsonl", *resume.glob("*/trials.jsonl")]:
                if trials.exists():
                    read_trials(trials)  # a damaged file is named with its line now, not after a server started
        check_carry(cfg, dirs)
        if run_definition.carried(cfg.get("resume_carry")) and any(o in ("-m", "--multirun") for o in overrides):
            raise ConfigError("command line", "resume_carry", "carries launches of one run over: resume one run "
                                                              "at a time, not a sweep (-m)")
        ledger.check_path(cfg.ledger)
        # a run directory's launches belong to one definition (a sweep's job directories: checked by the session)
        run_definition.vet_resume(dirs, run_definition.in_force(resolved.hypothesis_path, resolved.experiment,
                                                                resolved.design),
                                  name=resolved.hypothesis.name, ledger_path=Path(str(cfg.ledger)),
                                  requests_n=resolved.design.requests,
                                  carry=run_definition.carried(cfg.get("resume_carry")))
    return checked


def check_carry(cfg: DictConfig, dirs: list[Path]) -> None:
    """`resume_carry=[ID,...]`: launches of the resumed directories, carried over only with an amendment."""
    carry = run_definition.carried(cfg.get("resume_carry"))
    if not carry:
        return
    if not dirs:
        raise ConfigError("command line", "resume_carry", "names launches to carry over from resume=DIR: give resume=")
    if not bool(cfg.get("allow_amend", False)):
        raise ConfigError("command line", "resume_carry", "carrying launches of another definition over is an "
                                                          "amendment: add allow_amend=true (the ledger lists them)")
    known: set[str] = set()
    for d in dirs:
        if (d / "trials.jsonl").is_file():
            for r in Trials(read_trials(d / "trials.jsonl")).of_kind("launch"):
                if r.get("launch_id") is not None:
                    known |= {str(r["launch_id"]), str(r["launch_id"]).rpartition("-a")[0]}
    unknown = sorted(carry - known)
    if unknown and any((d / "trials.jsonl").is_file() for d in dirs):
        raise ConfigError("command line", "resume_carry", f"no launch {unknown[0]!r} in {', '.join(map(str, dirs))}"
                                                          f"; give launch ids as trials.jsonl names them (c1-r0-a1)")


def precheck_one(overrides: list[str], command: str, *, search: bool = False,
                 bisect: bool = False) -> tuple[DictConfig, Resolved]:
    """`precheck` for a command that takes one configuration, not a sweep (plan, register, search, bisect)."""
    checked = precheck(overrides, search=search, bisect=bisect)
    if len(checked) != 1:
        raise ConfigError("command line", "overrides", f"{command} takes one value per key, not a sweep")
    return checked[0]
