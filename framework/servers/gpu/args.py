"""The GPU server's command line: SGLang's flag names (as the sim has them) plus the few this server adds."""

from __future__ import annotations

import argparse
from typing import Literal

from pydantic import Field, model_validator

from framework.servers.api.args import SglangLaunchArgs


class GpuServerArgs(SglangLaunchArgs):
    """SGLang's ServerArgs subset this server implements, plus its own options."""

    enable_torch_symm_mem: bool = False
    speculative_algorithm: Literal["EAGLE", "EAGLE3", "NEXTN", "NGRAM"] | None = None
    speculative_draft_model_path: str | None = None
    speculative_num_steps: int | None = Field(None, ge=1)
    speculative_eagle_topk: int | None = Field(None, ge=1, le=1)
    speculative_num_draft_tokens: int | None = Field(None, ge=2)
    cuda_graph_max_bs: int | None = Field(None, ge=1)
    disable_cuda_graph: bool = False
    disable_overlap_schedule: bool = False
    context_length: int = Field(1024, ge=16)
    max_running_requests: int = Field(64, ge=1)
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    device: Literal["auto", "cuda", "cpu"] = "auto"
    mem_fraction_static: float | None = Field(None, gt=0, le=1)
    random_seed: int | None = None
    enable_metrics: bool = False
    log_level: str = "info"
    api_key: str | None = None
    served_model_name: str | None = None
    speculative_accept_rate: float = Field(0.7, ge=0, le=1)
    chunked_prefill_size: int = Field(4096, ge=1)
    decode_path: Literal["fused", "reference"] = "fused"
    batch1_gemv: Literal["split-k", "compiled"] = "compiled"
    torch_compile_mode: Literal["max-autotune-no-cudagraphs", "default", "none"] = "max-autotune-no-cudagraphs"
    worker_rank: int = Field(0, ge=0)
    dist_init_method: str | None = None

    @model_validator(mode="after")
    def _ngram_at_tp1(self) -> "GpuServerArgs":
        if self.speculative_algorithm == "NGRAM" and self.tp_size != 1:
            raise ValueError("--speculative-algorithm NGRAM runs at --tp-size 1")
        return self

    @property
    def num_draft_tokens(self) -> int:
        """Tokens per verify pass: the draft's chain plus the last accepted token (topk 1)."""
        if self.speculative_num_draft_tokens is not None:
            return self.speculative_num_draft_tokens
        return (self.speculative_num_steps or 3) + 1


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m framework.servers.gpu",
        description="A real GPU server behind SGLang's API: a Llama-shaped decoder with seeded random weights, or a "
                    "Hugging Face Llama directory's safetensors.",
    )
    p.add_argument("--model-path", "--model", dest="model_path", required=True,
                   help="tiny, llama-1b, llama-8b (or their Hugging Face names), or a directory with config.json "
                        "(and, for real weights, *.safetensors and a tokenizer.json)")
    p.add_argument("--tokenizer-path")
    p.add_argument("--tp-size", "--tp", dest="tp_size", type=int, default=1)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--enable-torch-symm-mem", action="store_true",
                   help="all-reduce through torch symmetric memory, one-shot (never multicast)")
    p.add_argument("--speculative-algorithm", choices=("EAGLE", "EAGLE3", "NEXTN", "NGRAM"),
                   help="EAGLE/EAGLE3/NEXTN: a one-layer draft model, acceptance declared; NGRAM: drafts by n-gram "
                        "lookup in the prompt and output, accepted by the target's own greedy tokens (TP1)")
    p.add_argument("--speculative-draft-model-path", help="ignored: the draft is one layer of the target's shape")
    p.add_argument("--speculative-num-steps", type=int)
    p.add_argument("--speculative-eagle-topk", type=int)
    p.add_argument("--speculative-num-draft-tokens", type=int)
    p.add_argument("--cuda-graph-max-bs", type=int)
    p.add_argument("--chunked-prefill-size", type=int, help="padded prompt tokens per prefill forward (default "
                   "4096); prompts are batched whole, not split into chunks")
    p.add_argument("--disable-cuda-graph", action="store_true")
    p.add_argument("--disable-overlap-schedule", action="store_true",
                   help="read each decode step's tokens back before launching the next (TP1 without speculation "
                        "overlaps them by default; TP > 1 and speculation never do)")
    p.add_argument("--context-length", type=int)
    p.add_argument("--max-running-requests", type=int)
    p.add_argument("--dtype", choices=("auto", "bfloat16", "float16", "float32"))
    p.add_argument("--mem-fraction-static", type=float, help="accepted for SGLang compatibility; the cache is sized "
                   "by --context-length and --max-running-requests")
    p.add_argument("--random-seed", type=int)
    p.add_argument("--enable-metrics", action="store_true")
    p.add_argument("--log-level", default="info")
    p.add_argument("--api-key")
    p.add_argument("--served-model-name")
    own = p.add_argument_group("GPU server")
    own.add_argument("--device", choices=("auto", "cuda", "cpu"), help="auto: cuda when available")
    own.add_argument("--speculative-accept-rate", type=float,
                     help="declared per-token acceptance of draft tokens (random weights cannot agree, so "
                          "acceptance is a seeded draw at this rate; records say it is declared)")
    own.add_argument("--decode-path", choices=("fused", "reference"),
                     help="fused (default): compiled per-layer pieces and a length-aware attention kernel for TP1 "
                          "decode on CUDA; reference: the plain PyTorch forward (always used at TP > 1, with "
                          "speculation, and on the CPU)")
    own.add_argument("--torch-compile-mode", choices=("max-autotune-no-cudagraphs", "default", "none"),
                     help="how the fused pieces are compiled (default max-autotune-no-cudagraphs)")
    own.add_argument("--batch1-gemv", choices=("split-k", "compiled"),
                     help="the fused path's O and down projections at batch 1: compiled (default): inside the "
                          "torch.compile pieces; split-k: a split-K GEMV kernel (measured slower on an H200)")
    own.add_argument("--worker-rank", type=int, help=argparse.SUPPRESS)
    own.add_argument("--dist-init-method", help=argparse.SUPPRESS)
    return p


def parse_server_args(argv: list[str]) -> GpuServerArgs:
    """Parse an SGLang-style argv; bad flags exit 2 with argparse's usage message."""
    parser = build_parser()
    ns = parser.parse_args(argv)
    values = {k: v for k, v in vars(ns).items() if v is not None}
    try:
        return GpuServerArgs(**values)
    except Exception as exc:  # pydantic range checks -> argparse-style error, exit 2
        parser.error(str(exc).splitlines()[-1] if str(exc) else repr(exc))
        raise  # unreachable
