"""Backends differ only in what they start: the simulator, real SGLang, or nothing (an endpoint).

`server_spec` turns (backend settings, experiment, hypothesis condition, port, seed) into the
argv and environment the launcher runs. The simulator gets exactly the flags real SGLang would,
plus its `--sim-*` options.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from framework import design
from framework.execution.launcher import ServerSpec
from framework.spec import Experiment, Hypothesis


class BackendSettings(BaseModel):
    """The `backend` config group (conf/backend/*.yaml)."""

    model_config = ConfigDict(extra="forbid")

    name: Literal["sim", "sglang", "endpoint"]
    python: str | None = None  # interpreter for sim/sglang; null = this one
    module: str | None = None  # sglang.launch_server or framework.sim
    host: str = "127.0.0.1"
    ready_timeout_s: float = Field(900.0, gt=0)
    extra_args: list[str] = []
    env: dict[str, str] = {}
    api_key: str | None = None
    # simulator only
    speedup: float = Field(1.0, gt=0)
    noise_scale: float = Field(1.0, ge=0)
    ground_truth: bool = False
    # endpoint only
    url: str | None = None

    @property
    def time_scale(self) -> float:
        """Factor from wall seconds to model seconds for everything the client measures."""
        return self.speedup if self.name == "sim" else 1.0


SIM_API_KEY_ENV = "SIM_API_KEY"  # the simulator reads its API key from this variable
DEFAULT_MODULE = {"sim": "framework.sim", "sglang": "sglang.launch_server"}


def server_spec(
    backend: BackendSettings,
    exp: Experiment,
    h: Hypothesis,
    cond: design.Condition,
    *,
    port: int,
    seed: int,
    log_path: Path,
) -> ServerSpec:
    """What to run for one launch of `cond` (not used by the endpoint backend)."""
    python = design.python_for(h, cond, backend.python or sys.executable)
    module = backend.module or DEFAULT_MODULE[backend.name]
    argv = [
        python, "-m", module,
        "--model-path", exp.model_path,
        "--tp-size", str(exp.tp_size),
        "--host", backend.host,
        "--port", str(port),
        "--random-seed", str(seed),
        *design.server_args_for(h, exp, cond),
        *backend.extra_args,
    ]
    env = {**backend.env, **design.env_for(h, cond)}
    if backend.api_key and backend.name == "sim":
        env[SIM_API_KEY_ENV] = backend.api_key  # kept out of argv (ps, trials)
    elif backend.api_key:
        argv += ["--api-key", backend.api_key]  # SGLang takes it only as a flag
    if backend.name == "sim":
        argv += [
            "--sim-profile", design.sim_profile_for(h, exp, cond),
            "--sim-speedup", repr(backend.speedup),
            "--sim-noise-scale", repr(backend.noise_scale),
        ]
        if backend.ground_truth:
            argv += ["--sim-ground-truth", str(log_path.with_suffix(".chunks.jsonl"))]
    return ServerSpec(
        argv=argv, host=backend.host, port=port, log_path=log_path, env=env,
        ready_timeout_s=backend.ready_timeout_s, api_key=backend.api_key,
    )
