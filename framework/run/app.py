"""The Hydra application behind `python -m framework run`, and config checks that precede it.

Hydra composes `conf/` with the command line, makes the run (or sweep job) directory and calls
`hydra_run`. Before Hydra starts anything, `precheck` composes the same config with the
compose API and loads every hypothesis the command names, so a bad override, a missing file or
an invalid field fails with one clear line and exit code 2 before any server starts.
"""

from __future__ import annotations

import functools
import re
import sys
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf

from framework.core.spec import SpecError

CONF_DIR = str(Path(__file__).resolve().parent.parent / "conf")


def run_name(hypothesis: str) -> str:
    """The hypothesis as a run directory's name: a path's stem, so `../x.yaml` stays inside outputs/."""
    stem = Path(str(hypothesis)).name.removesuffix(".yaml").removesuffix(".yml")
    return re.sub(r"[^\w.-]+", "_", stem).strip("._") or "hypothesis"


OmegaConf.register_new_resolver("run_name", run_name, replace=True)
EXIT_BAD_INPUT = 2
EXIT_NO_DATA = 3  # the run finished but a condition measured nothing: no verdict can be claimed
NO_DATA_RUNS: list[str] = []
RESUME_HINT: list[str] = [""]  # the directory `resume=` takes for the job now running (the sweep's, in a multirun)  # run directories of this process's jobs that measured nothing


def user_errors() -> tuple[type[Exception], ...]:
    """Exceptions that mean the input (files, command line, ledger state) is wrong, not the program."""
    from framework.records.ledger import LedgerError
    from framework.records.registration import RegistrationChanged
    from framework.records.trials import TrialsFileError

    return (SpecError, RegistrationChanged, LedgerError, TrialsFileError)


def report_error(exc: Exception) -> int:
    print(f"error: {exc}", file=sys.stderr)
    return EXIT_BAD_INPUT


def _quoting_hint(message: str) -> str:
    """Hydra's lexer error, plus how to pass a value with spaces or other characters Hydra reserves."""
    if "LexerNoViableAlt" in message or "no viable alternative" in message or "mismatched input" in message:
        return (f"{message} (quote a value with spaces, non-ASCII or special characters for Hydra: "
                "'hypothesis=\"path/my file.yaml\"')")
    return message


def compose(overrides: list[str]) -> DictConfig:
    """The run config for `overrides` (single values only), without starting a Hydra job."""
    from hydra import compose as hydra_compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from framework.run.runner import ConfigError

    try:
        with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
            cfg = hydra_compose(config_name="config", overrides=overrides)
    except (HydraException, OmegaConfBaseException, ValueError) as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        unknown = re.match(r"Could not override '([^']+)'", message)
        if unknown:  # a misspelt key: name it and what is allowed there, not Hydra's "use +key" advice
            raise ConfigError("command line", unknown.group(1), _allowed_at(unknown.group(1))) from None
        raise ConfigError("command line", "overrides", _quoting_hint(message)) from None
    problems = unknown_keys(cfg)
    if problems:
        raise ConfigError("command line", *problems[0])
    return cfg


@functools.cache
def _base_config() -> dict[str, Any]:
    """The run config with no override, as plain data (a ??? value stays the string "???"); read-only."""
    from hydra import compose as hydra_compose, initialize_config_dir

    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return OmegaConf.to_container(hydra_compose(config_name="config"), resolve=False)  # type: ignore[return-value]


def _keys(section: dict[str, Any]) -> str:
    return ", ".join(sorted(str(k) for k in section))


def _allowed_at(key: str) -> str:
    """Why `key` is not a config key: the keys of the section it names, or that its parent is a value."""
    node: Any = _base_config()
    path: list[str] = []
    for part in key.split("."):
        if not isinstance(node, dict):
            return f"{'.'.join(path)} is a value, not a section (it has no key {part!r})"
        if part not in node:
            return f"unknown key; allowed in {'.'.join(path) or 'the config'}: {_keys(node)}"
        node = node[part]
        path.append(part)
    return "cannot be overridden here"


def unknown_keys(cfg: DictConfig) -> list[tuple[str, str]]:
    """(key, why) for keys a `+key=value` override added that nothing reads, outside the sections that
    check their own fields (backend, design: pydantic): a typo there would be silently ignored."""
    base = _base_config()
    out: list[tuple[str, str]] = []
    for key in cfg.keys():  # keys(), not `in`: a key whose value is ??? is not `in` a DictConfig
        if key not in base:
            out.append((str(key), f"unknown key; allowed: {_keys(base)}"))
        elif key not in ("backend", "design") and isinstance(base[key], dict):
            out += [(f"{key}.{sub}", f"unknown key; allowed in {key}: {_keys(base[key])}")
                    for sub in cfg[key].keys() if sub not in base[key]]
    return out


def sweep_variants(overrides: list[str]) -> list[list[str]]:
    """Override lists that together use every value of every sweep: each swept `hypothesis` with
    the other sweeps at their first value, plus one list per other value of every other sweep."""
    from framework.run.runner import ConfigError

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except Exception as exc:  # hydra raises its own parse error types
        raise ConfigError("command line", "overrides", _quoting_hint(str(exc).strip().splitlines()[0])) from None
    fixed: list[str] = []
    hypotheses: list[str] = []
    alternatives: list[tuple[int, str]] = []  # (position in fixed, override) for every non-first swept value
    for ov in parsed:
        key = ov.get_key_element()
        if ov.is_sweep_override():
            values = list(ov.sweep_string_iterator())
            if key == "hypothesis":
                hypotheses = values
                continue
            alternatives += [(len(fixed), f"{key}={v}") for v in values[1:]]
            fixed.append(f"{key}={values[0]}")
        else:
            fixed.append(ov.input_line if ov.input_line else f"{key}={ov.get_value_element_as_str()}")
    heads = [[f"hypothesis={h}"] for h in hypotheses] or [[]]
    variants = [fixed + head for head in heads]
    for pos, override in alternatives:
        variants.append(fixed[:pos] + [override] + fixed[pos + 1:] + heads[0])
    return variants


def precheck(overrides: list[str]) -> None:
    """Raise SpecError for anything that would make the run fail before measuring."""
    from framework.run.runner import ConfigError, effective_design, load_pair, sim_coverage_or_refuse
    from framework.run.preflight import backend_fits, backend_settings
    from framework.execution.backends import BackendConfigError, check
    from framework.records import ledger
    from framework.records.trials import read_trials

    for variant in sweep_variants([o for o in overrides if not o.startswith("-")]):
        cfg = compose(variant)
        if OmegaConf.is_missing(cfg, "hypothesis"):
            raise ConfigError("command line", "hypothesis", "missing: say which, e.g. hypothesis=eagle3_allreduce")
        h, h_path, exp = load_pair(cfg)
        effective_design(h.design, OmegaConf.to_container(cfg.design, resolve=True), h)  # type: ignore[arg-type]
        backend = backend_settings(OmegaConf.to_container(cfg.backend, resolve=True))  # type: ignore[arg-type]
        try:
            check(backend, exp)  # its argv template, and whether it takes the experiment's flag names
        except BackendConfigError as exc:
            raise ConfigError("command line", exc.field, exc.message) from None
        if backend.simulated:
            sim_coverage_or_refuse(h, h_path, exp, allow=bool((cfg.get("sim") or {}).get("allow_unmodelled")))
        backend_fits(backend, h)
        if cfg.get("resume"):
            resume = Path(cfg.resume)
            if not resume.exists():
                raise ConfigError("command line", "resume", f"{resume} does not exist; give a run or sweep directory")
            for trials in [resume / "trials.jsonl", *resume.glob("*/trials.jsonl")]:
                if trials.exists():
                    read_trials(trials)  # a damaged file is named with its line now, not after a server started
        ledger.check_path(cfg.ledger)


@hydra.main(config_path=CONF_DIR, config_name="config", version_base="1.3")
def hydra_run(cfg: DictConfig) -> Any:
    from framework.run.runner import resolve, run

    hydra_cfg = HydraConfig.get()
    runtime = hydra_cfg.runtime
    run_dir = Path(runtime.output_dir)
    multirun = str(hydra_cfg.mode).endswith("MULTIRUN")
    RESUME_HINT[0] = str(Path(runtime.cwd, hydra_cfg.sweep.dir) if multirun else run_dir)  # what resume= takes
    try:
        ctx = resolve(cfg, run_dir, Path(runtime.cwd))
        record = run(ctx)
    except user_errors() as exc:
        _remove_if_unused(run_dir)
        sys.exit(report_error(exc))
    no_data = (record.get("analysis", {}).get("details") or {}).get("no_data")
    if no_data:
        causes = "; ".join(no_data.values())
        print(f"error: no data: {causes}; the verdict is recorded as inconclusive ({run_dir})", file=sys.stderr)
        NO_DATA_RUNS.append(str(run_dir))
    return record["verdict"]


def _remove_if_unused(run_dir: Path) -> None:
    """A refused run leaves nothing behind: drop the directory Hydra made if it holds only Hydra's files."""
    import shutil

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
