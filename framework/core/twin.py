"""A fitted digital twin of one deployment: the performance model's parameters with their uncertainty.

`python -m framework fit pilot=RUN_DIR` writes one (YAML); `backend=sim sim_profile=FILE` serves it
(the sim reads the same document as a profile) and `plan` plans with it. The equations are the sim's
(docs/model.md, "Twin"); this module holds only plain data: which parameters exist, what a pilot must
vary for each to be identifiable, the configuration of one pilot launch, and the fitted document.
"""

from __future__ import annotations

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
}
FITTED_METRICS = ("ttft_s", "tpot_s")  # fitted on; every request metric is predicted from them


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
    pilots: list[dict[str, Any]] = []  # {path, trials_sha256, launches, backend}
    configs_fitted: int = Field(0, ge=0)
    fixed: dict[str, Any] = {}  # what the engine's flags fix at every pilot launch (e.g. llama-cpp-python's 1 slot)
    notes: list[str] = []

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


def is_twin_document(data: object) -> bool:
    return isinstance(data, dict) and data.get("kind") == "twin"
