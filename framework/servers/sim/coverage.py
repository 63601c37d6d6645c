"""Does the simulator model what a hypothesis varies? A pure check over the conditions' command lines.

Each condition's SGLang argv is parsed and resolved exactly as the sim will at launch
(:func:`framework.servers.sim.args.parse_server_args`), then compared flag by flag across conditions
with the reviewed classes of ``flag_classes.yaml``:

- a *not modelled* flag (or a modelled flag at a value the model does not cover, or two values it
  does not tell apart, such as EAGLE vs EAGLE3) that differs between conditions makes the
  hypothesis a question the sim cannot answer: refused on ``backend=sim`` unless overridden;
- a value the profile fixes (``--tp-size`` against a TP8 profile) that differs from it, likewise;
- a not-modelled flag that is the same everywhere is accepted and listed as not modelled;
- *no effect* flags are ignored;
- a workload the model does not cover (``shared_prefix``: the sim has no radix cache, so every request
  would prefill its whole prompt, as if SGLang had no prefix cache) is refused whether or not it varies.

Only flags some condition sets on its command line are compared, so values SGLang derives from
another flag (max running requests 48 with speculative decoding) follow the flag that caused them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from framework.core import design as design_mod
from framework.core.spec import Experiment, Hypothesis
from framework.servers.sim import engines, flags
from framework.servers.sim.args import FlagError, parse_server_args
from framework.servers.sim.profile import ProfileError, load_profile


@dataclass(frozen=True)
class Condition:
    """One condition as the check sees it: a label, the factor levels, the SGLang argv, the sim profile."""

    label: str
    levels: dict[str, str]
    argv: list[str]
    profile: str
    shared_prefix: dict[str, int] | None = None  # the workload's shared prefix (groups, prefix_tokens), if any


@dataclass(frozen=True)
class Finding:
    flag: str                   # as a user writes it, e.g. --mem-fraction-static
    reason: str                 # why the sim cannot answer: "not modelled", "fixed by the profile", ...
    values: dict[str, Any]      # condition label -> resolved value
    levels: str                 # the levels that differ, e.g. "mem=low: 0.6, mem=high: 0.9"
    varies: bool = True         # False: refused wherever it is set (a workload the model does not cover)

    def line(self) -> str:
        if not self.varies:
            return f"{self.flag} ({self.reason}) is set in {self.levels}"
        return f"{self.flag} ({self.reason}) differs between levels: {self.levels}"


@dataclass
class Coverage:
    refused: list[Finding] = field(default_factory=list)     # differences the sim cannot model
    constant: list[str] = field(default_factory=list)        # not-modelled flags set the same everywhere
    problems: list[str] = field(default_factory=list)        # argv the sim cannot parse (flag, message)

    def as_dict(self) -> dict[str, Any]:
        return {"unmodelled_varied": [f.line() for f in self.refused],
                "unmodelled_varied_flags": sorted({f.flag for f in self.refused}),
                "unmodelled_constant": self.constant}


def conditions(h: Hypothesis, exp: Experiment) -> list[Condition]:
    """Every condition's SGLang command line, sim profile and shared prefix, for the coverage check."""
    out = []
    for c in design_mod.conditions(h):
        sp = design_mod.workload_for(h, exp, c).shared_prefix
        out.append(Condition(
            label=c.label(), levels=c.levels, profile=design_mod.sim_profile_for(h, exp, c),
            argv=["--model-path", exp.model_path, "--tp-size", str(exp.tp_size),
                  *design_mod.server_args_for(h, exp, c)],
            shared_prefix=sp.model_dump() if sp is not None else None))
    return out


NO_PREFIX_CACHE = ("not modelled: the sim has no prefix (radix) cache, every request would prefill its whole "
                   "prompt and report cached_tokens 0")


NO_TEXT = ("the simulator generates no text (its tokens are counts on a model clock), so it cannot answer an outputs "
           "prediction; run it on a backend that generates (llamacpp, vllm, gpu, sglang)")


def unanswerable(h: Hypothesis) -> list[tuple[str, str]]:
    """(field, why) for each prediction the sim cannot answer whatever the override: an outputs prediction."""
    return [(f"predictions[{i}].kind", f"{p.id}: {NO_TEXT}") for i, p in enumerate(h.predictions)
            if p.kind == "outputs"]


def _check_workloads(cov: Coverage, conds: list[Condition]) -> None:
    """Refuse a shared-prefix workload in any condition: the answer would be SGLang's without RadixAttention."""
    values = {c.label: c.shared_prefix for c in conds if c.shared_prefix is not None}
    if values:
        cov.refused.insert(0, Finding("workload.shared_prefix", NO_PREFIX_CACHE, values,
                                      ", ".join(f"[{label}]" for label in values), varies=False))


def _key(v: Any) -> str:
    return json.dumps(v, sort_keys=True, default=str)


def _levels_text(conds: list[Condition], values: dict[str, Any]) -> str:
    """Name the factor whose levels carry the difference ("f=a: 1, f=b: 2"), else the conditions."""
    factors = list(conds[0].levels) if conds else []
    for f in factors:
        by_level: dict[str, set[str]] = {}
        for c in conds:
            if c.label in values:
                by_level.setdefault(c.levels[f], set()).add(_key(values[c.label]))
        if len(by_level) > 1 and all(len(v) == 1 for v in by_level.values()) and \
                len({next(iter(v)) for v in by_level.values()}) > 1:
            return ", ".join(f"{f}={lv}: {next(iter(v))}" for lv, v in by_level.items())
    return ", ".join(f"[{c.label}]: {_key(values[c.label])}" for c in conds if c.label in values)


def check(conds: list[Condition]) -> Coverage:
    cov = Coverage()
    resolved: dict[str, dict[str, Any]] = {}
    explicit: set[str] = set()
    engine_flags: dict[str, dict[str, str]] = {}  # a twin of an engine with its own flags: label -> flags given
    for c in conds:
        try:
            a = parse_server_args(c.argv + ["--sim-profile", c.profile], require_model_path=False, raise_errors=True)
        except FlagError as exc:
            cov.problems.append(f"[{c.label}] {exc}")
            continue
        except flags.ServerArgsError:
            continue  # SGLang itself refuses this combination at start-up; the launch outcome will say so
        resolved[c.label] = a.server_args
        explicit |= set(a.explicit)
        if a.engine_settings is not None and engines.engine_takes_own_flags(a.engine_settings.engine):
            engine_flags[c.label] = {**a.engine_settings.given, "engine": a.engine_settings.engine}
        try:
            num_gpus = load_profile(c.profile).hardware.get("num_gpus")
        except ProfileError:
            num_gpus = None
        if num_gpus is not None and a.tp_size != num_gpus:
            cov.refused.append(Finding(
                "--tp-size", f"fixed at {num_gpus} by sim profile {c.profile}",
                {c.label: a.tp_size}, f"[{c.label}]: {a.tp_size}", varies=False))
    klass = flags.classes()
    active_when: dict[str, str] = klass.get("active_when", {})
    modelled_values: dict[str, list[Any]] = klass.get("modelled_values", {})
    indistinct: dict[str, list[list[Any]]] = klass.get("indistinct", {})
    c2f = flags.table()["cli_to_field"]
    live = [c for c in conds if c.label in resolved]
    _check_workloads(cov, conds)
    _check_engine_flags(cov, live, engine_flags)
    for fld in sorted(explicit):
        dest = flags.field_to_dest().get(fld, fld)
        cls = flags.flag_class(dest)
        if cls == "no_effect" or dest in c2f and c2f[dest] == "tp_size" or fld == "tp_size":
            continue
        gate = active_when.get(dest)
        values = {c.label: resolved[c.label].get(fld) for c in live
                  if gate is None or resolved[c.label].get(c2f.get(gate, gate)) is not None}
        distinct = {_key(v) for v in values.values()}
        name = flags.option_name(dest)
        if cls == "not_modelled":
            if len(distinct) > 1:
                cov.refused.append(Finding(name, "not modelled", values, _levels_text(live, values)))
            elif values:
                cov.constant.append(name)
            continue
        covered = modelled_values.get(dest)
        outside = covered is not None and any(v not in covered for v in values.values())
        if outside:
            if len(distinct) > 1:
                cov.refused.append(Finding(name, f"modelled only for {covered}", values, _levels_text(live, values)))
            else:
                cov.constant.append(f"{name} {next(iter(values.values()))}")
            continue
        for group in indistinct.get(dest, []):
            seen = {_key(v) for v in values.values() if v in group}
            if len(seen) > 1:
                cov.refused.append(Finding(name, f"{' and '.join(map(str, group))} are not told apart", values,
                                           _levels_text(live, values)))
    return cov


def _check_engine_flags(cov: Coverage, live: list[Condition], given: dict[str, dict[str, str]]) -> None:
    """A twin's engine flags: a not-modelled one that differs between conditions is refused, one set alike is
    listed (framework.servers.sim.engines)."""
    if not given:
        return
    engine = next(iter(given.values()))["engine"]
    names = sorted({f for g in given.values() for f in g if f != "engine"})
    for name in names:
        if engines.modelled(engine, name) or engines.no_effect(engine, name):
            continue
        values = {c.label: given.get(c.label, {}).get(name) for c in live if c.label in given}
        if len({_key(v) for v in values.values()}) > 1:
            cov.refused.append(Finding(name, f"not modelled by the {engine} twin", values, _levels_text(live, values)))
        else:
            cov.constant.append(name)
