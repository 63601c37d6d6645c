"""The fused decode step: one token per row through the target model, as an engine's decode kernel path.

The same function as :meth:`Llama.forward` at ``T = 1`` (the reference, which the CPU tests and the device
check compare this against), cut at attention into pieces that ``torch.compile`` fuses per layer:

- ``pre``: the residual add, RMSNorm, the QKV projection, rotary on q and k, and the KV-cache write;
- attention: :func:`~framework.servers.gpu.attention.decode_attention` (Triton on CUDA), reading each row's
  cache only up to its own length;
- ``post``: the O projection, the residual add, RMSNorm, the gate/up projection, SwiGLU and the down projection;
- ``head``: the last residual add, RMSNorm, the LM head and the greedy argmax.

At batch 1 with ``batch1_gemv="split-k"`` (not the default: on an H200 it measured 0.995 ms a step against 0.944
with the projections left in the compiled pieces, one run, one machine) the two narrow projections leave the
compiled pieces for the split-K GEMV of :mod:`~framework.servers.gpu.gemv`, which adds into float32 rows of one
buffer zeroed once a step: ``post1`` is the residual add of the O projection's row, RMSNorm and gate/up; the down
projection reads gate/up through SwiGLU in the GEMV; the next ``pre`` (or ``head``) adds the down projection's row
to the residual.

Each piece is compiled once for all layers (the weights are arguments) and once per shape class of the batch
(1, then dynamic), so a capture of every batch size costs three compiles per piece; Inductor's on-disk cache makes
the next launch on the machine cheap. The executor captures the whole step, all layers, in one CUDA graph.
Tensor parallelism keeps the reference path (its all-reduces sit between these pieces).
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F

from framework.servers.gpu.attention import decode_attention
from framework.servers.gpu.gemv import gemv_accumulate, plan_for
from framework.servers.gpu.model import KVCache, Llama

COMPILE_MODES = ("max-autotune-no-cudagraphs", "default", "none")
BATCH1_GEMVS = ("split-k", "compiled")


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return xf.to(x.dtype) * w


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.float().chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)


class FusedDecoder:
    """Decode steps of ``model`` (TP1) through compiled per-layer pieces and the length-aware attention."""

    def __init__(self, model: Llama, compile_mode: str = "max-autotune-no-cudagraphs", batch1_gemv: str = "compiled"
                 ) -> None:
        if model.tp_size != 1:
            raise ValueError("the fused decode step is for one process (TP1); TP keeps the reference path")
        if compile_mode not in COMPILE_MODES:
            raise ValueError(f"compile_mode {compile_mode!r}: use one of {COMPILE_MODES}")
        if batch1_gemv not in BATCH1_GEMVS:
            raise ValueError(f"batch1_gemv {batch1_gemv!r}: use one of {BATCH1_GEMVS}")
        self.model, self.compile_mode = model, compile_mode
        H, KV, D, eps = model.heads, model.kv_heads, model.head_dim, model.shape.rms_norm_eps
        inter = model.inter

        def pre(x: torch.Tensor, d: torch.Tensor, w_norm: torch.Tensor, w_qkv: torch.Tensor, cos: torch.Tensor,
                sin: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, rows: torch.Tensor, pos: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
            B = x.shape[0]
            x = x + d
            qkv = _rms(x, w_norm, eps) @ w_qkv.t()
            q, k, v = qkv.split([H * D, KV * D, KV * D], dim=-1)
            q = _rope(q.view(B, H, D), cos, sin)
            kc[rows, :, pos] = _rope(k.view(B, KV, D), cos, sin)
            vc[rows, :, pos] = v.view(B, KV, D)
            return x, q.contiguous()

        def post(x: torch.Tensor, att: torch.Tensor, w_o: torch.Tensor, w_norm: torch.Tensor, w_gate_up: torch.Tensor,
                 w_down: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            x = x + att.reshape(x.shape[0], H * D) @ w_o.t()
            gate, up = (_rms(x, w_norm, eps) @ w_gate_up.t()).split(inter, dim=-1)
            return x, (F.silu(gate) * up) @ w_down.t()

        def head(x: torch.Tensor, d: torch.Tensor, w_norm: torch.Tensor, lm_head: torch.Tensor) -> torch.Tensor:
            return (_rms(x + d, w_norm, eps) @ lm_head.t()).argmax(-1)

        def pre1(x: torch.Tensor, acc: torch.Tensor, *rest: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return pre(x, acc.to(x.dtype), *rest)

        def post1(x: torch.Tensor, o_acc: torch.Tensor, w_norm: torch.Tensor, w_gate_up: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor]:
            x = x + o_acc.to(x.dtype)
            return x, (_rms(x, w_norm, eps) @ w_gate_up.t()).contiguous()

        def head1(x: torch.Tensor, acc: torch.Tensor, w_norm: torch.Tensor, lm_head: torch.Tensor) -> torch.Tensor:
            return head(x, acc.to(x.dtype), w_norm, lm_head)

        self.pre: Callable[..., Any] = self._compile(pre)
        self.post: Callable[..., Any] = self._compile(post)
        self.head: Callable[..., Any] = self._compile(head)
        # batch 1: the O and down projections as split-K GEMVs between compiled pieces (None: not this shape)
        layer0 = model.layers[0]
        self.plans = None
        if batch1_gemv == "split-k":
            o_plan, down_plan = plan_for(*layer0["o"].shape), plan_for(*layer0["down"].shape)
            if o_plan is not None and down_plan is not None:
                self.plans = (o_plan, down_plan)
                self.pre1: Callable[..., Any] = self._compile(pre1)
                self.post1: Callable[..., Any] = self._compile(post1)
                self.head1: Callable[..., Any] = self._compile(head1)
        self.batch1_gemv = "split-k" if self.plans else "compiled"

    def _compile(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        if self.compile_mode == "none" or self.model.device.type != "cuda":
            return fn
        return torch.compile(fn, mode=self.compile_mode, fullgraph=True)

    def step(self, tokens: torch.Tensor, positions: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """Greedy next tokens ``[B]`` for ``tokens [B]`` at ``positions [B]`` in cache rows ``0 .. B-1``."""
        x, d = self.layers(tokens, positions, cache)
        head = self.head1 if tokens.shape[0] == 1 and self.plans is not None else self.head
        return head(x, d, self.model.norm, self.model.lm_head)

    def logits(self, tokens: torch.Tensor, positions: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """Logits ``[B, vocab]`` of the same step, the head uncompiled (for comparing with the reference)."""
        x, d = self.layers(tokens, positions, cache)
        d = d.to(x.dtype)  # batch 1's split-K path hands its float32 row
        return self.model._rms(x + d, self.model.norm) @ self.model.lm_head.t()

    def layers(self, tokens: torch.Tensor, positions: torch.Tensor, cache: KVCache
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Every layer: the residual stream and the last layer's MLP output, not yet added (at batch 1 with the
        split-K GEMV: a float32 row)."""
        m = self.model
        B = tokens.shape[0]
        x = F.embedding(tokens, m.embed)
        cos, sin = m.cos[positions].unsqueeze(1), m.sin[positions].unsqueeze(1)  # [B, 1, D/2]
        rows = torch.arange(B, device=tokens.device)
        lens = positions + 1
        if B == 1 and self.plans is not None:
            return self._layers1(x, cos, sin, rows, positions, lens, cache)
        d = torch.zeros_like(x)
        for layer, kc, vc in zip(m.layers, cache.k, cache.v, strict=False):
            x, q = self.pre(x, d, layer["in_norm"], layer["qkv"], cos, sin, kc, vc, rows, positions)
            att = decode_attention(q, kc[:B], vc[:B], lens)
            x, d = self.post(x, att, layer["o"], layer["post_norm"], layer["gate_up"], layer["down"])
        return x, d

    def _layers1(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rows: torch.Tensor,
                 positions: torch.Tensor, lens: torch.Tensor, cache: KVCache) -> tuple[torch.Tensor, torch.Tensor]:
        assert self.plans is not None
        o_plan, down_plan = self.plans
        m = self.model
        # row 0: the first layer's "previous MLP output" (zero); layer l adds O into row 2l + 1, down into 2l + 2
        acc = torch.zeros((2 * len(m.layers) + 1, 1, x.shape[-1]), device=x.device,
                          dtype=torch.promote_types(x.dtype, torch.float32))
        for i, (layer, kc, vc) in enumerate(zip(m.layers, cache.k, cache.v, strict=False)):
            x, q = self.pre1(x, acc[2 * i], layer["in_norm"], layer["qkv"], cos, sin, kc, vc, rows, positions)
            att = decode_attention(q, kc[:1], vc[:1], lens)
            gemv_accumulate(att.reshape(1, -1), layer["o"], o_plan, acc[2 * i + 1])
            x, gate_up = self.post1(x, acc[2 * i + 1], layer["post_norm"], layer["gate_up"])
            gemv_accumulate(gate_up, layer["down"], down_plan, acc[2 * i + 2], swiglu=True)
        return x, acc[-1]
