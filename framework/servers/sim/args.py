"""The simulated server's command line: all of SGLang 0.5.9's flags, resolved as SGLang resolves them.

One parser serves the CLI (``python -m framework.servers.sim``), the pure planning helper
(:func:`framework.servers.sim.expected.expected_metrics`) and the pre-launch check of a hypothesis
(:mod:`framework.servers.sim.coverage`), so a flag means the same thing everywhere. The flags come from
the generated table (:mod:`framework.servers.sim.flags`); :class:`SimServerArgs` is the part the
performance model reads, plus the full resolved ServerArgs (``server_args``) that
``/get_server_info`` returns, and SGLang's warning lines.
"""

from __future__ import annotations

import argparse
import functools
import os
from typing import Any, Literal

from pydantic import Field

from framework.servers.api.args import SglangLaunchArgs
from framework.servers.sim import engines, flags
from framework.servers.sim.faults import FaultPlan, plan_from_values
from framework.servers.sim.faults import add_arguments as add_fault_arguments
from framework.servers.sim.profile import DEFAULT_PROFILE, Profile, ProfileError, load_profile

API_KEY_ENV = "SIM_API_KEY"  # read when --api-key is not given, so launchers keep the key out of argv


class SimServerArgs(SglangLaunchArgs):
    """What the performance model reads (SGLang's field names, resolved), plus the ``sim_*`` options."""

    enable_flashinfer_allreduce_fusion: bool = False
    enable_torch_symm_mem: bool = False
    disable_custom_all_reduce: bool = False
    speculative_algorithm: Literal["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"] | None = None
    speculative_draft_model_path: str | None = None
    speculative_num_steps: int | None = Field(None, ge=1)
    speculative_eagle_topk: int | None = Field(None, ge=1)
    speculative_num_draft_tokens: int | None = Field(None, ge=2)
    cuda_graph_max_bs: int | None = Field(None, ge=1)
    disable_cuda_graph: bool = False
    mem_fraction_static: float | None = Field(None, gt=0, le=1)
    max_running_requests: int | None = Field(None, ge=1)
    context_length: int | None = Field(None, ge=1)
    random_seed: int | None = None
    enable_metrics: bool = False
    log_level: str = "info"
    api_key: str | None = None
    served_model_name: str | None = None
    sim_profile: str = DEFAULT_PROFILE
    sim_speedup: float = Field(1.0, gt=0)
    sim_noise_scale: float = Field(1.0, ge=0)
    sim_ground_truth: str | None = None
    sim_startup_s: float | None = Field(None, ge=0)
    # a machine-level effect (off by default): the machine's and this configuration's own speed factors,
    # each of log-sd sim_machine_effect, drawn from the machine's id (framework.servers.sim.model.machine_factor)
    sim_machine_effect: float = Field(0.0, ge=0)
    sim_machine: str | None = None
    # a test knob (off at 1.0): every decode step takes this many times as long, so a bisection's calibration
    # and end-to-end test can plant a known regression (e.g. 1.03: decode 3% slower) in one "version"
    sim_decode_slowdown: float = Field(1.0, gt=0)
    # SGLang's full ServerArgs after its resolution, the flags the command line set, its warnings
    server_args: dict[str, Any] = {}
    explicit: frozenset[str] = frozenset()
    warnings: tuple[str, ...] = ()
    sim_faults: FaultPlan | None = None  # --sim-fault-* / --sim-fault-plan (framework.servers.sim.faults)
    engine_settings: engines.EngineSettings | None = None  # a twin profile's engine flags (sim/engines.py)

    @property
    def speculative(self) -> bool:
        return self.speculative_algorithm is not None


SIM_DEFAULTS = {"sim_profile": DEFAULT_PROFILE, "sim_speedup": 1.0, "sim_noise_scale": 1.0,
                "sim_ground_truth": None, "sim_startup_s": None, "sim_machine_effect": 0.0, "sim_machine": None,
                "sim_decode_slowdown": 1.0}


class FlagError(ValueError):
    """A command line argparse rejects (raised instead of exiting when asked to)."""


class _RaisingParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise FlagError(message)


def build_parser(*, raise_errors: bool = False) -> argparse.ArgumentParser:
    kind = _RaisingParser if raise_errors else argparse.ArgumentParser
    p = kind(
        prog="python -m framework.servers.sim",
        description=f"Simulated SGLang {flags.sglang_version()} server (SGLang's flags and HTTP API, a performance "
                    "model behind them).",
    )
    flags.add_sglang_flags(p)
    sim = p.add_argument_group("simulator")
    s = argparse.SUPPRESS
    sim.add_argument("--sim-profile", default=s, help="shipped profile name or YAML path")
    sim.add_argument("--sim-speedup", type=float, default=s,
                     help="run the model clock this many times faster than wall time")
    sim.add_argument("--sim-noise-scale", type=float, default=s, help="0: deterministic mean model")
    sim.add_argument("--sim-ground-truth", metavar="PATH", default=s,
                     help="write one JSON line per emitted chunk")
    sim.add_argument("--sim-startup-s", type=float, default=s,
                     help="model seconds of start-up (default: the profile's)")
    sim.add_argument("--sim-machine-effect", type=float, default=s,
                     help="log-sd of a machine's speed factor and of each configuration's on it (0: off)")
    sim.add_argument("--sim-machine", metavar="ID", default=s,
                     help="the machine id the factors are drawn from (the framework passes the launch's)")
    sim.add_argument("--sim-decode-slowdown", type=float, default=s,
                     help="test knob: every decode step takes this many times as long (1.03: a planted 3%% "
                          "regression; default 1.0)")
    add_fault_arguments(p)
    return p


@functools.lru_cache(maxsize=2)
def _shared_parser(raise_errors: bool) -> argparse.ArgumentParser:
    """One parser per error mode, built once: building one adds SGLang's few hundred flags (30 ms), and a twin's
    fit parses a command line for every configuration at every trial point (hundreds of parses). parse_args
    does not change a parser, so one serves every call."""
    return build_parser(raise_errors=raise_errors)


MODEL_FIELDS = [n for n in SimServerArgs.model_fields if n not in ("server_args", "explicit", "warnings")
                and not n.startswith("sim_")]


def parse_server_args(argv: list[str], *, require_model_path: bool = True,
                      raise_errors: bool = False, _plain: bool = False) -> SimServerArgs:
    """Parse an SGLang argv. Bad flags exit 2 with argparse's usage message, as SGLang does.

    A combination SGLang's own resolution rejects raises :class:`flags.ServerArgsError`
    (SGLang dies at start-up with it). ``raise_errors``: raise :class:`FlagError` instead of exiting.
    """
    argv = list(argv)
    twin = None if _plain else _twin_profile(argv)
    if twin is not None:
        return parse_twin_args(twin, argv, require_model_path=require_model_path, raise_errors=raise_errors)
    if not require_model_path and not any(a in ("--model-path", "--model") or a.startswith("--model-path=")
                                           for a in argv):
        argv = ["--model-path", "sim-model", *argv]
    parser = _shared_parser(raise_errors)
    given = vars(parser.parse_args(argv))
    try:
        fault_plan = plan_from_values(given)  # pops the sim_fault_* values
    except ValueError as exc:
        parser.error(str(exc))
    sim = {**SIM_DEFAULTS, **{k: v for k, v in given.items() if k.startswith("sim_")}}
    cli = {**flags.flag_defaults(), **{k: v for k, v in given.items() if not k.startswith("sim_")}}
    if not cli.get("api_key") and os.environ.get(API_KEY_ENV):  # the key out of argv (ps)
        cli["api_key"] = os.environ[API_KEY_ENV]
    try:
        gpu_mem = load_profile(sim["sim_profile"]).hardware.get("gpu_memory_mib")
    except ProfileError:
        gpu_mem = None  # reported by the caller that loads the profile
    resolved = flags.resolve(cli, float(gpu_mem) if gpu_mem else None, set(given) - set(sim))
    a = resolved.args
    values = {k: a[k] for k in MODEL_FIELDS if k in a}
    try:
        return SimServerArgs(**values, **sim, server_args=a, explicit=frozenset(resolved.explicit),
                             warnings=tuple(resolved.warnings), sim_faults=fault_plan)
    except Exception as exc:  # pydantic range checks -> argparse-style error, exit 2
        parser.error(str(exc).splitlines()[-1] if str(exc) else repr(exc))
        raise  # unreachable


def _twin_profile(argv: list[str]) -> Profile | None:
    """The twin profile named by --sim-profile, if the command line names one (else None)."""
    name = None
    for i, tok in enumerate(argv):
        if tok == "--sim-profile" and i + 1 < len(argv):
            name = argv[i + 1]
        elif tok.startswith("--sim-profile="):
            name = tok.partition("=")[2]
    if name is None or not (name.endswith((".yaml", ".yml", ".json")) or os.path.sep in name):
        return None
    try:
        prof = load_profile(name)
    except ProfileError:
        return None  # reported by the caller that loads the profile
    return prof if prof.twin is not None else None


def parse_twin_args(profile: Profile, argv: list[str], *, require_model_path: bool = False,
                    raise_errors: bool = True) -> SimServerArgs:
    """A command line for a twin profile: an engine with its own flags (llama.cpp, vLLM) has them read by
    :mod:`framework.servers.sim.engines`, the rest (the sim's own flags) parsed as SGLang's."""
    twin = profile.twin
    assert twin is not None
    if not engines.engine_takes_own_flags(twin.engine):
        a = parse_server_args(argv, require_model_path=require_model_path, raise_errors=raise_errors, _plain=True)
        chunk = a.server_args.get("chunked_prefill_size") if "chunked_prefill_size" in a.explicit else None
        es = engines.EngineSettings(engine=twin.engine, prefill_chunk=chunk if chunk and chunk > 0 else None,
                                    slots=a.max_running_requests, tp=a.tp_size)
        return a.model_copy(update={"engine_settings": es})
    own = {"--model-path", "--tp-size", "--host", "--port", "--random-seed",
           *engines.SIM_SPEC_FLAGS.get(twin.engine, set())}
    mine, theirs = engines.split(argv, twin.engine, own)
    try:
        es = engines.settings(twin.engine, theirs)
    except engines.EngineFlagError as exc:
        if raise_errors:
            raise FlagError(str(exc)) from None
        build_parser().error(str(exc))
        raise
    a = parse_server_args(mine, require_model_path=require_model_path, raise_errors=raise_errors, _plain=True)
    update: dict[str, Any] = {"engine_settings": es, "max_running_requests": es.slots, "context_length": es.context}
    if es.tp is not None:
        update["tp_size"] = es.tp
    return a.model_copy(update=update)
