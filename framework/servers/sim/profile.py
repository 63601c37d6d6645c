"""Hardware/software profiles of the simulated server: pydantic models and the YAML loader.

A profile holds every number the performance model uses, so that calibration is data, not code,
and each number can carry a comment citing its source (see ``profiles/*.yaml`` and docs/model.md).
``--sim-profile`` takes a shipped profile's name or a path to a YAML file.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from framework.core.twin import MAX_FILE_BYTES, TwinFit, bounds_problem, is_twin_document

PROFILE_DIR = Path(__file__).parent / "profiles"
DEFAULT_PROFILE = "rtx_pro_6000_tp8"

Table = list[tuple[float, float]]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _check_table(table: Table) -> Table:
    xs = [x for x, _ in table]
    if xs != sorted(xs) or len(set(xs)) != len(xs):
        raise ValueError("table x values must be strictly increasing")
    return table


class ModelShape(_Strict):
    num_layers: int = Field(ge=1)
    hidden_size: int = Field(ge=1)
    dtype_bytes: int = Field(2, ge=1)
    allreduces_per_layer: int = Field(2, ge=0)

    @property
    def bytes_per_token(self) -> int:
        """Bytes one token contributes to one tensor-parallel all-reduce (7168 x bf16 = 14,336)."""
        return self.hidden_size * self.dtype_bytes


class ComputeTables(_Strict):
    decode: Table = Field(min_length=1)
    prefill: Table = Field(min_length=1)

    @field_validator("decode", "prefill")
    @classmethod
    def _increasing(cls, v: Table) -> Table:
        return _check_table(v)


class AllReduceTables(_Strict):
    nccl: Table = Field(min_length=1)
    flashinfer_fused: Table = []
    custom: Table = []
    torch_symm_mem: Table = []

    @field_validator("nccl", "flashinfer_fused", "custom", "torch_symm_mem")
    @classmethod
    def _increasing(cls, v: Table) -> Table:
        return _check_table(v)


class Features(_Strict):
    custom_allreduce: bool
    flashinfer_fusion: Literal["ok", "crash"]
    torch_symm_mem: bool


class SpecParams(_Strict):
    default_num_steps: int = Field(3, ge=1)
    default_eagle_topk: int = Field(1, ge=1)
    default_num_draft_tokens: int = Field(4, ge=2)
    draft_step_us: float = Field(ge=0)
    draft_step_us_per_extra_req: float = Field(0.0, ge=0)
    draft_prefill_us: float = Field(0.0, ge=0)
    overhead_us: float = Field(ge=0)
    accept_length_mean: float = Field(gt=1.0)
    accept_length_ref_steps: int = Field(3, ge=1)


class NoiseParams(_Strict):
    launch_log_sd: float = Field(ge=0)
    request_log_sd: float = Field(ge=0)
    step_log_sd: float = Field(ge=0)
    slow_launch_prob: float = Field(ge=0, le=1)
    slow_launch_factor: float = Field(ge=1)
    accept_length_request_sd: float = Field(ge=0)


class OutputLength(_Strict):
    """Where a request's EOS falls when ``ignore_eos`` is off: a lognormal number of output tokens
    (assumed chat-like; seeded by the prompt, so a greedy request repeats its length)."""

    median_tokens: float = Field(300.0, gt=0)
    log_sd: float = Field(1.0, ge=0)
    eos_token_id: int = 1  # DeepSeek-V3's end-of-sentence id


class Profile(_Strict):
    """Everything the pure model needs to know about one machine + software stack."""

    name: str
    description: str = ""
    version: str = "0.5.9-sim"
    hardware: dict[str, str | int | bool] = {}
    stack: dict[str, str] = {}
    model: ModelShape
    compute_us: ComputeTables
    allreduce_us: AllReduceTables
    features: Features
    fused_max_bytes: int = Field(ge=0)
    custom_max_bytes: int = Field(ge=0)
    symm_mem_max_bytes: int = Field(ge=0)
    fusion_saved_us_per_layer: float = Field(ge=0)
    forward_overhead_us: float = Field(ge=0)
    launch_overhead_us_per_layer: float = Field(ge=0)
    request_overhead_us: float = Field(ge=0)
    spec: SpecParams
    noise: NoiseParams
    startup_s: float = Field(ge=0)
    crash_after_s: float = Field(ge=0)
    output_length: OutputLength = OutputLength()
    context_length: int = Field(163840, ge=1)  # the model's max context (DeepSeek-V3: 163,840)
    twin: TwinFit | None = None  # a fitted twin (framework fit): its equations replace the tables (sim/twin.py)


class ProfileError(ValueError):
    """The profile named by --sim-profile cannot be found or is invalid (message names the file)."""


def available_profiles() -> list[str]:
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))


def resolve_profile_path(name_or_path: str) -> Path:
    """A shipped profile's name, or a path to a YAML file."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.is_file():
            raise ProfileError(f"{name_or_path}: no such profile file")
        return path
    shipped = PROFILE_DIR / f"{name_or_path}.yaml"
    if not shipped.is_file():
        raise ProfileError(f"unknown sim profile {name_or_path!r}; shipped: {', '.join(available_profiles())}")
    return shipped


def _safe_load(text: str) -> object:
    """``yaml.safe_load``, through libyaml's parser when PyYAML has it (several times faster, which
    counts at server start-up); anything libyaml rejects is re-read by the pure-Python loader, so
    errors (and their messages) are PyYAML's own."""
    fast = getattr(yaml, "CSafeLoader", None)
    if fast is not None:
        try:
            return yaml.load(text, Loader=fast)  # noqa: S506 - CSafeLoader is the safe loader
        except yaml.YAMLError:
            pass
    return yaml.safe_load(text)


def parse_profile(text: str, source: str = "<profile>") -> Profile:
    try:
        data = _safe_load(text)
    except yaml.YAMLError as exc:
        raise ProfileError(f"{source}: invalid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ProfileError(f"{source}: a profile is a YAML mapping")
    try:
        if is_twin_document(data):  # a `framework fit` document: the twin's profile, bounded (core/twin.py)
            fit = TwinFit.model_validate(data)
            if (problem := bounds_problem(fit)) is not None:
                raise ProfileError(f"{source}: {problem}")
            return profile_from_fit(fit)
        return Profile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        msg = str(first["msg"]).removeprefix("Value error, ")
        raise ProfileError(f"{source}: {field}: {msg}" if field else f"{source}: {msg}") from exc


@lru_cache(maxsize=32)
def load_profile(name_or_path: str = DEFAULT_PROFILE) -> Profile:
    path = resolve_profile_path(name_or_path)
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:  # read before parsing: a huge file is refused at once, not parsed for minutes
        raise ProfileError(f"{path}: {size} bytes; a profile is at most {MAX_FILE_BYTES} bytes")
    return parse_profile(path.read_text(encoding="utf-8"), str(path))


def profile_from_fit(fit: TwinFit) -> Profile:
    """The sim profile that serves a twin: the twin's block plus neutral values for SGLang's tables (unused)."""
    acc = fit.parameters.get("accept_length")
    accept = acc.estimate if acc is not None and acc.estimate is not None and acc.estimate > 1.0 else 2.0
    tp = int(fit.fixed.get("tp_size", 1))
    tpot = fit.noise.get("tpot_s")
    return Profile.model_validate({
        "name": fit.name, "description": f"twin of {fit.engine}, fitted by `python -m framework fit`",
        "version": f"twin-{fit.engine}", "hardware": {"num_gpus": tp}, "stack": {"engine": fit.engine},
        "model": {"num_layers": 1, "hidden_size": 1, "dtype_bytes": 1, "allreduces_per_layer": 0},
        "compute_us": {"decode": [(1, 0.0)], "prefill": [(1, 0.0)]}, "allreduce_us": {"nccl": [(1, 0.0)]},
        "features": {"custom_allreduce": False, "flashinfer_fusion": "ok", "torch_symm_mem": False},
        "fused_max_bytes": 0, "custom_max_bytes": 0, "symm_mem_max_bytes": 0, "fusion_saved_us_per_layer": 0.0,
        "forward_overhead_us": 0.0, "launch_overhead_us_per_layer": 0.0, "request_overhead_us": 0.0,
        "spec": {"draft_step_us": 0.0, "overhead_us": 0.0, "accept_length_mean": accept},
        "noise": {"launch_log_sd": (tpot.launch_log_sd or 0.0) if tpot else 0.0,
                  "request_log_sd": (tpot.request_log_sd or 0.0) if tpot else 0.0,
                  "step_log_sd": 0.0, "slow_launch_prob": 0.0, "slow_launch_factor": 1.0,
                  "accept_length_request_sd": 0.0},
        "startup_s": 1.0, "crash_after_s": 0.5, "twin": fit,
    })
