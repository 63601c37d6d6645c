"""The run config as Hydra composes it, and the checks of the command line's overrides.

`compose` builds the config for one list of overrides with Hydra's compose API (no job, no output
directory), naming a misspelt key and what is allowed there; `sweep_variants` expands a multirun's
overrides into the lists that together use every swept value, so each can be checked before anything
starts.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf

from framework.errors import ConfigError

CONF_DIR = str(Path(__file__).resolve().parent.parent / "conf")

def run_name(hypothesis: str) -> str:
    """The hypothesis as a run directory's name: a path's stem, so `../x.yaml` stays inside outputs/."""
    stem = Path(str(hypothesis)).name.removesuffix(".yaml").removesuffix(".yml")
    return re.sub(r"[^\w.-]+", "_", stem).strip("._") or "hypothesis"


OmegaConf.register_new_resolver("run_name", run_name, replace=True)


def _quoting_hint(message: str) -> str:
    """Hydra's lexer error, plus how to pass a value with spaces or other characters Hydra reserves."""
    if "LexerNoViableAlt" in message or "no viable alternative" in message or "mismatched input" in message:
        return (f"{message} (quote a value with spaces, non-ASCII or special characters for Hydra: "
                "'hypothesis=\"path/my file.yaml\"')")
    return message

def compose(overrides: list[str]) -> DictConfig:
    """The run config for `overrides` (single values only), without starting a Hydra job."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
            cfg = hydra_compose(config_name="config", overrides=overrides)
    except (HydraException, OmegaConfBaseException, ValueError) as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        unknown = re.match(r"Could not override '([^']+)'", message)
        if unknown:  # a misspelt key: name it and what is allowed there, not Hydra's "use +key" advice
            raise ConfigError("command line", unknown.group(1),
                              _allowed_at(unknown.group(1), _group_choices(overrides))) from None
        raise ConfigError("command line", "overrides", _quoting_hint(message)) from None
    problems = unknown_keys(cfg)
    if problems:
        raise ConfigError("command line", *problems[0])
    return cfg

@functools.cache
def _base_config(groups: tuple[str, ...] = ()) -> dict[str, Any]:
    """The run config with only the config-group choices `groups` (such as `backend=endpoint`), as plain
    data (a ??? value stays the string "???"); read-only."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = hydra_compose(config_name="config", overrides=list(groups))
        return OmegaConf.to_container(cfg, resolve=False)  # type: ignore[return-value]


def _group_choices(overrides: list[str]) -> tuple[str, ...]:
    """The overrides that choose a config group (`backend=endpoint`): the sections a misspelt key is
    looked up in are those of the chosen option, not of the default."""
    groups = {p.name for p in Path(CONF_DIR).iterdir() if p.is_dir()}
    return tuple(o for o in overrides if "=" in o and o.split("=", 1)[0] in groups)

def default_time_scale() -> float:
    """Model seconds per wall second of the default backend (the sim's speed-up), for estimates before a run."""
    backend = _base_config().get("backend") or {}
    speedup = backend.get("speedup")
    return float(speedup) if isinstance(speedup, (int, float)) and speedup > 0 else 1.0

def _keys(section: dict[str, Any]) -> str:
    return ", ".join(sorted(str(k) for k in section))

def _allowed_at(key: str, groups: tuple[str, ...] = ()) -> str:
    """Why `key` is not a config key: the keys of the section it names, or that its parent is a value."""
    try:
        node: Any = _base_config(groups)
    except Exception:  # noqa: BLE001 - a bad group choice is reported by its own error; fall back to the default
        node = _base_config()
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
