"""The simulated server's command line: SGLang's flag names, parsed into a ServerArgs-like model.

One parser serves the CLI (``python -m framework.sim``) and the pure planning helper
(:func:`framework.sim.model.expected_metrics`), so a flag means the same thing in both places.
Field names follow SGLang's ``ServerArgs`` so ``/get_server_info`` looks like SGLang's.
"""

from __future__ import annotations

import argparse
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from framework.sim.profile import DEFAULT_PROFILE

SPEC_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN")


class SimServerArgs(BaseModel):
    """SGLang's ServerArgs subset the sim understands, plus the ``sim_*`` options."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model_path: str
    tokenizer_path: str | None = None
    tp_size: int = Field(1, ge=1)
    host: str = "127.0.0.1"
    port: int = Field(30000, ge=0, le=65535)
    enable_flashinfer_allreduce_fusion: bool = False
    enable_torch_symm_mem: bool = False
    disable_custom_all_reduce: bool = False
    speculative_algorithm: Literal["EAGLE", "EAGLE3", "NEXTN"] | None = None
    speculative_draft_model_path: str | None = None
    speculative_num_steps: int | None = Field(None, ge=1)
    speculative_eagle_topk: int | None = Field(None, ge=1)
    speculative_num_draft_tokens: int | None = Field(None, ge=2)
    cuda_graph_max_bs: int | None = Field(None, ge=1)
    disable_cuda_graph: bool = False
    mem_fraction_static: float | None = Field(None, gt=0, le=1)
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

    @property
    def speculative(self) -> bool:
        return self.speculative_algorithm is not None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m framework.sim",
        description="Simulated SGLang server (SGLang's flags and HTTP API, a performance model behind them).",
    )
    p.add_argument("--model-path", "--model", dest="model_path", required=True)
    p.add_argument("--tokenizer-path", dest="tokenizer_path")
    p.add_argument("--tp-size", "--tp", dest="tp_size", type=int, default=1)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--enable-flashinfer-allreduce-fusion", action="store_true")
    p.add_argument("--enable-torch-symm-mem", action="store_true")
    p.add_argument("--disable-custom-all-reduce", action="store_true")
    p.add_argument("--speculative-algorithm", choices=SPEC_ALGORITHMS)
    p.add_argument("--speculative-draft-model-path")
    p.add_argument("--speculative-num-steps", type=int)
    p.add_argument("--speculative-eagle-topk", type=int)
    p.add_argument("--speculative-num-draft-tokens", type=int)
    p.add_argument("--cuda-graph-max-bs", type=int)
    p.add_argument("--disable-cuda-graph", action="store_true")
    p.add_argument("--mem-fraction-static", type=float)
    p.add_argument("--random-seed", type=int)
    p.add_argument("--enable-metrics", action="store_true")
    p.add_argument("--log-level", default="info")
    p.add_argument("--api-key")
    p.add_argument("--served-model-name")
    sim = p.add_argument_group("simulator")
    sim.add_argument("--sim-profile", default=DEFAULT_PROFILE, help="shipped profile name or YAML path")
    sim.add_argument("--sim-speedup", type=float, default=1.0,
                     help="run the model clock this many times faster than wall time")
    sim.add_argument("--sim-noise-scale", type=float, default=1.0, help="0: deterministic mean model")
    sim.add_argument("--sim-ground-truth", metavar="PATH", help="write one JSON line per emitted chunk")
    sim.add_argument("--sim-startup-s", type=float, help="model seconds of start-up (default: the profile's)")
    return p


def parse_server_args(argv: list[str], *, require_model_path: bool = True) -> SimServerArgs:
    """Parse an SGLang-style argv. Bad flags exit 2 with argparse's usage message, as SGLang does."""
    argv = list(argv)
    if not require_model_path and not any(a in ("--model-path", "--model") or a.startswith("--model-path=")
                                           for a in argv):
        argv = ["--model-path", "sim-model", *argv]
    parser = build_parser()
    ns = parser.parse_args(argv)
    values = {k: v for k, v in vars(ns).items() if v is not None}
    try:
        return SimServerArgs(**values)
    except Exception as exc:  # pydantic range checks -> argparse-style error, exit 2
        parser.error(str(exc).splitlines()[-1] if str(exc) else repr(exc))
        raise  # unreachable
