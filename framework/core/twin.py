"""A fitted digital twin of one deployment: the performance model's parameters with their uncertainty.

`python -m framework fit pilot=RUN_DIR` writes one (YAML); `backend=sim sim_profile=FILE` serves it
(the sim reads the same document as a profile) and `plan` plans with it. The equations are the sim's
(docs/model.md, "Twin"); this module holds only plain data: which parameters exist, what a pilot must
vary for each to be identifiable, the configuration of one pilot launch, and the fitted document.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Engine = Literal["sglang", "gpu", "llamacpp", "llama_server", "vllm"]
TWIN_FORMAT = 1

# parameter -> (unit, what a pilot must vary for it to be identifiable). Order = the fit's vector.
PARAMETERS: dict[str, tuple[str, str]] = {
    "decode_step_us": ("us", "any pilot with decode (two or more output tokens)"),
    "decode_us_per_token": ("us", "the decode batch: concurrency > 1 on a server that batches (--max-running-requests,"
                                  " --max-num-seqs, --parallel > 1), or speculative decoding (draft tokens)"),
    "prefill_base_us": ("us", "any pilot (time to first token)"),
    "prefill_us_per_token": ("us", "the prompt length (two or more prompt_tokens levels, or concurrency that"
                                   " prefills several prompts together)"),
    "prefill_chunk_us": ("us", "the number of prefill chunks: prompts longer than the chunk (--n_ubatch/--n_batch,"
                               " --max-num-batched-tokens, --chunked-prefill-size) at two chunk counts"),
    "thread_exponent": ("1", "the CPU threads (--n_threads / --threads at two values)"),
    "allreduce_us_per_token": ("us", "tensor parallelism (--tp-size 1 and > 1, or tp_size > 1 at two batch sizes)"),
    "spec_overhead_us": ("us", "speculative decoding on and off"),
    "accept_length": ("tokens", "speculative decoding on (the client's accept length per request)"),
    "eager_step_us": ("us", "CUDA graphs on and off (the GPU server's --disable-cuda-graph, or a batch above"
                            " --cuda-graph-max-bs)"),
}
FITTED_METRICS = ("ttft_s", "tpot_s")  # fitted on; every request metric is predicted from them

# Physical ranges of a twin read from a file (`bounds_problem`). A file is input: a hand edit or a tampered fit
# must be refused before a server serves it, not run for minutes on NaN or 1e300. A step of more than 10 s, a
# log-scale noise sd above 3 (a factor of 20 per sd) or a tensor-parallel size above 1024 is no deployment this
# framework measures. The fit's own trial points are not checked (it holds unknowns at 0 and steps past bounds).
MAX_STEP_US = 1e7
RANGES: dict[str, tuple[float, float]] = {
    **{name: (0.0, MAX_STEP_US) for name, (unit, _) in PARAMETERS.items() if unit == "us"},
    "thread_exponent": (-2.0, 3.0), "accept_length": (1.0, 16.0)}
POSITIVE = ("decode_step_us", "prefill_base_us")  # every request pays them: 0 would be an infinitely fast server
MAX_LOG_SD = 3.0
MAX_SE = 1e12
MAX_TP_SIZE = 1024
MAX_STARTUP_S = 3600.0
MAX_FILE_BYTES = 1 << 20  # a fitted twin is a few KiB; the size is checked before a file is parsed


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TwinConfig(_Strict):
    """One pilot launch as the model sees it: the engine's flags and the workload's shape."""

    engine: Engine
    flags: list[str] = []  # the engine's own flags (the experiment's and the level's server_args)
    tp_size: int = 1
    concurrency: int = 1
    prompt_tokens: int
    output_tokens: int
    requests: int = 3
    warmup: int = 1


class Parameter(_Strict):
    """One fitted parameter: its estimate and standard error, or why the pilot could not identify it."""

    estimate: float | None
    se: float | None = None
    unit: str = ""
    identifiable: bool
    needs: str = ""  # what a pilot must vary to identify it
    reason: str = ""  # why not identifiable (empty when it is)


class MetricNoise(_Strict):
    """Noise of one metric on the log scale: between launches, within a launch, and the fit's residual."""

    launch_log_sd: float | None
    request_log_sd: float | None
    residual_log_sd: float  # of launch means about the model (model misfit + launch noise + request noise / m)
    residual_df: int
    launches: int
    requests: int


class FlagNoise(_Strict):
    """The residual noise of the pilot's launches at one flag set. Flag sets can differ by far more than the
    model's terms say: on one H200 the GPU server's eager step moves with the host CPU's speed (about 2x, in
    fresh processes) while its CUDA-graph step holds within a few percent, and one pooled residual would give
    the graph arm the eager arm's interval."""

    flags: list[str]
    noise: dict[str, MetricNoise]


class Domain(_Strict):
    """The range of the pilot's settings: where the twin interpolates. A prediction outside it extrapolates
    the model's equations beyond anything measured, and says so (`extrapolation`)."""

    concurrency: tuple[int, int]  # streams, min and max
    prompt_tokens: tuple[int, int]
    output_tokens: tuple[int, int]
    tp_size: list[int]  # the tensor-parallel sizes measured (a size between two is not measured either)
    flags: list[list[str]]  # each distinct flag set the pilot ran


def domain_of(configs: list[TwinConfig]) -> Domain:
    """The domain of a pilot's configurations (at least one)."""

    def span(values: list[int]) -> tuple[int, int]:
        return min(values), max(values)

    flag_sets: list[list[str]] = []
    for c in configs:
        if list(c.flags) not in flag_sets:
            flag_sets.append(list(c.flags))
    return Domain(concurrency=span([c.concurrency for c in configs]),
                  prompt_tokens=span([c.prompt_tokens for c in configs]),
                  output_tokens=span([c.output_tokens for c in configs]),
                  tp_size=sorted({c.tp_size for c in configs}), flags=flag_sets)


def extrapolation(domain: "Domain | None", config: TwinConfig) -> list[str]:
    """Why a prediction at `config` is outside the pilot's settings (empty inside them). A twin without a
    recorded domain (fitted before issue 35) cannot say where it interpolates: that is itself the mark."""
    if domain is None:
        return ["the twin records no pilot domain (fitted before its settings were recorded): refit it"]
    out = []
    for what, value, (lo, hi) in (("streams", config.concurrency, domain.concurrency),
                                  ("prompt tokens", config.prompt_tokens, domain.prompt_tokens),
                                  ("output tokens", config.output_tokens, domain.output_tokens)):
        if not lo <= value <= hi:
            out.append(f"{what} {value} outside the pilot's {lo}-{hi}")
    if config.tp_size not in domain.tp_size:
        out.append(f"tp size {config.tp_size} not among the pilot's {', '.join(map(str, domain.tp_size))}")
    if list(config.flags) not in domain.flags:
        out.append(f"flags {' '.join(config.flags) or '(none)'} not a flag set the pilot ran")
    return out


class TwinFit(_Strict):
    """The fit document (a sim profile too: `backend=sim sim_profile=FILE`)."""

    kind: Literal["twin"] = "twin"
    format: int = TWIN_FORMAT
    name: str
    engine: Engine
    reference_threads: int | None = None  # thread_exponent scales compute by (threads / this) ** -exponent
    parameters: dict[str, Parameter]
    covariance: dict[str, dict[str, float]] = {}  # between identifiable parameters
    noise: dict[str, MetricNoise] = {}
    noise_by_flags: list[FlagNoise] = []  # each flag set's residual (empty: one residual serves every flag set)
    pilots: list[dict[str, Any]] = []  # {path, trials_sha256, launches, backend}
    configs_fitted: int = Field(0, ge=0)
    fixed: dict[str, Any] = {}  # what the engine's flags fix at every pilot launch (e.g. llama-cpp-python's 1 slot)
    notes: list[str] = []
    domain: Domain | None = None  # the pilot's settings (None in a twin fitted before issue 35)
    pilot_host: dict[str, Any] = {}  # the machine the pilot measured on, as `fit` found it (host, cpu, load)
    busy: list[str] = []  # why the pilot's machine looked busy (empty: it did not), `fit`'s rule

    def noise_at(self, flags: list[str]) -> dict[str, MetricNoise]:
        """The residual noise a prediction at `flags` varies by: that flag set's when the fit kept one, else the
        pooled one."""
        for group in self.noise_by_flags:
            if list(group.flags) == list(flags):
                return group.noise
        return self.noise

    def value(self, name: str) -> float:
        """A parameter's estimate; an unidentified one counts 0 (its effect is unknown; predictions say so)."""
        p = self.parameters.get(name)
        return float(p.estimate) if p is not None and p.estimate is not None else 0.0

    def with_values(self, values: dict[str, float]) -> "TwinFit":
        """The same twin at other parameter values (the fit's and the intervals' trial points)."""
        params = {k: p.model_copy(update={"estimate": values[k]}) if k in values else p
                  for k, p in self.parameters.items()}
        return self.model_copy(update={"parameters": params})


def blank(engine: Engine, name: str = "twin", reference_threads: int | None = None) -> TwinFit:
    """A twin with every parameter unidentified (the fit's starting document)."""
    params = {k: Parameter(estimate=None, unit=unit, identifiable=False, needs=needs)
              for k, (unit, needs) in PARAMETERS.items()}
    return TwinFit(name=name, engine=engine, reference_threads=reference_threads, parameters=params)


def _outside(value: float | None, what: str, lo: float, hi: float) -> str | None:
    if value is None or (math.isfinite(value) and lo <= value <= hi):
        return None
    return f"{what} must be a finite number in [{lo:g}, {hi:g}] (got {value!r})"


def bounds_problem(fit: TwinFit) -> str | None:
    """Why a twin read from a file cannot be served (field, allowed range, value), or None: every estimate, standard
    error, covariance and noise sd finite and within its physical range, `fixed`'s values of their type."""
    checks: list[tuple[float | None, str, float, float]] = []
    for name, p in fit.parameters.items():
        lo, hi = RANGES[name]
        checks += [(p.estimate, f"parameters.{name}.estimate", lo, hi), (p.se, f"parameters.{name}.se", 0.0, MAX_SE)]
    noises = [(f"noise.{metric}", nz) for metric, nz in fit.noise.items()]
    noises += [(f"noise_by_flags.{i}.noise.{metric}", nz) for i, group in enumerate(fit.noise_by_flags)
               for metric, nz in group.noise.items()]
    for where, nz in noises:
        checks += [(getattr(nz, k), f"{where}.{k}", 0.0, MAX_LOG_SD)
                   for k in ("launch_log_sd", "request_log_sd", "residual_log_sd")]
    checks += [(c, f"covariance.{a}.{b}", -math.inf, math.inf) for a, row in fit.covariance.items()
               for b, c in row.items()]
    for check in checks:
        if (problem := _outside(*check)) is not None:
            return problem
    unknown = sorted(set(fit.parameters) - set(PARAMETERS))
    if unknown:
        return f"parameters.{unknown[0]}: not a twin parameter; allowed: {', '.join(PARAMETERS)}"
    for name in POSITIVE:
        if fit.value(name) <= 0:
            return (f"parameters.{name}.estimate must be > 0 to serve the twin (every request pays it; got "
                    f"{fit.parameters[name].estimate if name in fit.parameters else None!r})")
    if fit.reference_threads is not None and not 1 <= fit.reference_threads <= 4096:
        return f"reference_threads must be a whole number from 1 to 4096 (got {fit.reference_threads!r})"
    tp = fit.fixed.get("tp_size", 1)
    if isinstance(tp, bool) or not isinstance(tp, int) or not 1 <= tp <= MAX_TP_SIZE:
        return f"fixed.tp_size must be a whole number from 1 to {MAX_TP_SIZE} (got {tp!r})"
    startup = fit.fixed.get("launch_startup_s", 1.0)
    if isinstance(startup, bool) or not isinstance(startup, (int, float)):
        return f"fixed.launch_startup_s must be a number of seconds (got {startup!r})"
    return _outside(float(startup), "fixed.launch_startup_s", 0.0, MAX_STARTUP_S)


def is_twin_document(data: object) -> bool:
    return isinstance(data, dict) and data.get("kind") == "twin"
