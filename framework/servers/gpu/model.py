"""A Llama-architecture decoder in plain PyTorch, tensor-parallel over any ``tp_size``, with seeded random weights.

One forward serves prefill (one request, the prompt), decode (a batch, one token each) and the
speculative verify pass (a batch, several tokens each): tokens ``[B, T]`` at absolute ``positions``
attend to the KV cache rows ``row0 .. row0+B-1`` up to their own position. The running batch occupies
the first rows of the cache (the engine keeps it compact), so a step reads the cache through a view and
a CUDA graph captured at batch size ``bs`` reuses the same memory on every replay.

Tensor parallelism is Megatron's: the QKV and gate/up projections are split by output (heads,
intermediate units), the O and down projections by input, and each of the latter is followed by one
all-reduce (two per layer). Every rank draws the *full* weight from the same seed and keeps its slice,
so any ``tp_size`` computes the same function as one process (the CPU tests check this through gloo).
Embedding and LM head are replicated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from framework.servers.gpu.shapes import Shape

AllReduce = Callable[[torch.Tensor], torch.Tensor]


def _no_reduce(x: torch.Tensor) -> torch.Tensor:
    return x


@dataclass
class KVCache:
    """Per layer ``[rows, kv_heads_local, context, head_dim]`` keys and values, preallocated."""

    k: list[torch.Tensor]
    v: list[torch.Tensor]

    @classmethod
    def allocate(cls, layers: int, rows: int, kv_heads: int, context: int, head_dim: int,
                 device: torch.device, dtype: torch.dtype) -> "KVCache":
        shape = (rows, kv_heads, context, head_dim)
        return cls([torch.zeros(shape, device=device, dtype=dtype) for _ in range(layers)],
                   [torch.zeros(shape, device=device, dtype=dtype) for _ in range(layers)])

    @property
    def context(self) -> int:
        return self.k[0].shape[2]

    def move_row(self, src: int, dst: int) -> None:
        """Copy one request's cache row (the engine compacts the running batch into the first rows)."""
        for k, v in zip(self.k, self.v, strict=False):
            k[dst].copy_(k[src])
            v[dst].copy_(v[src])


def _weight(seed: int, layer: int, name: str, shape: tuple[int, int], std: float, device: torch.device,
            dtype: torch.dtype) -> torch.Tensor:
    """The full weight ``name`` of ``layer``, the same on every rank (a generator per weight)."""
    g = torch.Generator(device=device)
    g.manual_seed(_mix(seed, layer, name))
    w = torch.randn(shape, generator=g, device=device, dtype=torch.float32)
    return (w * std).to(dtype)


def _mix(seed: int, layer: int, name: str) -> int:
    """A stable 63-bit seed per (seed, layer, weight name); Python's hash() is salted per process."""
    h = 1469598103934665603
    for byte in f"{seed}/{layer}/{name}".encode():
        h = ((h ^ byte) * 1099511628211) & 0x7FFF_FFFF_FFFF_FFFF
    return h


class Llama(torch.nn.Module):
    """The decoder; ``all_reduce`` sums a row-parallel output over the TP group (identity at TP1)."""

    def __init__(self, shape: Shape, *, seed: int, tp_rank: int = 0, tp_size: int = 1,
                 device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32,
                 all_reduce: AllReduce = _no_reduce, context: int = 512, random_init: bool = True) -> None:
        super().__init__()
        s, d = shape, shape.dim_head
        for what, n in (("num_attention_heads", s.num_attention_heads), ("num_key_value_heads", s.num_key_value_heads),
                        ("intermediate_size", s.intermediate_size)):
            if n % tp_size:
                raise ValueError(f"{what}={n} is not divisible by tp_size={tp_size}")
        device = torch.device(device)
        self.shape, self.tp_rank, self.tp_size, self.all_reduce = s, tp_rank, tp_size, all_reduce
        self.heads, self.kv_heads = s.num_attention_heads // tp_size, s.num_key_value_heads // tp_size
        self.inter = s.intermediate_size // tp_size
        self.head_dim, self.device, self.dtype = d, device, dtype
        h = s.hidden_size

        def part(w: torch.Tensor, dim: int) -> torch.Tensor:
            return w.chunk(tp_size, dim=dim)[tp_rank].contiguous()

        def full(layer: int, name: str, shape_: tuple[int, int], fan_in: int) -> torch.Tensor:
            if not random_init:  # real weights follow (hf_weights.load_into): skip the draw, keep the layout
                return torch.empty(shape_, device=device, dtype=dtype)
            return _weight(seed, layer, name, shape_, 1.0 / math.sqrt(fan_in), device, dtype)

        self.embed = full(-1, "embed", (s.vocab_size, h), 1)
        self.lm_head = full(-1, "lm_head", (s.vocab_size, h), h)
        self.norm = torch.ones(h, device=device, dtype=dtype)
        self.layers: list[dict[str, torch.Tensor]] = []
        for i in range(s.num_hidden_layers):
            q = part(full(i, "q", (s.num_attention_heads * d, h), h), 0)
            k = part(full(i, "k", (s.num_key_value_heads * d, h), h), 0)
            v = part(full(i, "v", (s.num_key_value_heads * d, h), h), 0)
            gate = part(full(i, "gate", (s.intermediate_size, h), h), 0)
            up = part(full(i, "up", (s.intermediate_size, h), h), 0)
            self.layers.append({
                "qkv": torch.cat([q, k, v]).contiguous(),
                "o": part(full(i, "o", (h, s.num_attention_heads * d), s.num_attention_heads * d), 1),
                "gate_up": torch.cat([gate, up]).contiguous(),
                "down": part(full(i, "down", (h, s.intermediate_size), s.intermediate_size), 1),
                "in_norm": torch.ones(h, device=device, dtype=dtype),
                "post_norm": torch.ones(h, device=device, dtype=dtype),
            })
        inv = 1.0 / (s.rope_theta ** (torch.arange(0, d, 2, device=device, dtype=torch.float32) / d))
        ang = torch.outer(torch.arange(context, device=device, dtype=torch.float32), inv)
        self.cos, self.sin = ang.cos(), ang.sin()
        self.context = context

    def new_cache(self, rows: int) -> KVCache:
        return KVCache.allocate(len(self.layers), rows, self.kv_heads, self.context, self.head_dim,
                                self.device, self.dtype)

    def _rms(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.shape.rms_norm_eps)
        return xf.to(x.dtype) * w

    def _rope(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """Rotate-half RoPE (Hugging Face Llama's layout); ``x`` is ``[B, T, H, D]``."""
        x1, x2 = x.float().chunk(2, dim=-1)
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, cache: KVCache, row0: int = 0,
                last_only: bool = False, take: torch.Tensor | None = None) -> torch.Tensor:
        """Logits ``[B, T or 1, vocab]`` for ``tokens [B, T]`` at ``positions [B, T]``; writes their keys and
        values into cache rows ``row0 .. row0+B-1`` first, so every token sees itself and its past."""
        B, T = tokens.shape
        H, KV, D = self.heads, self.kv_heads, self.head_dim
        x = F.embedding(tokens, self.embed)
        cos = self.cos[positions].unsqueeze(2)  # [B, T, 1, D/2]
        sin = self.sin[positions].unsqueeze(2)
        rows = torch.arange(B, device=tokens.device).unsqueeze(1).expand(B, T)
        key_pos = torch.arange(cache.context, device=tokens.device)
        mask = (key_pos.view(1, 1, 1, -1) <= positions.view(B, 1, T, 1))  # [B, 1, T, C]
        for layer, kc, vc in zip(self.layers, cache.k, cache.v, strict=False):
            h = self._rms(x, layer["in_norm"])
            qkv = h @ layer["qkv"].t()
            q, k, v = qkv.split([H * D, KV * D, KV * D], dim=-1)
            q = self._rope(q.view(B, T, H, D), cos, sin)
            k = self._rope(k.view(B, T, KV, D), cos, sin)
            kr, vr = kc[row0:row0 + B], vc[row0:row0 + B]
            kr[rows, :, positions] = k
            vr[rows, :, positions] = v.view(B, T, KV, D)
            att = F.scaled_dot_product_attention(q.transpose(1, 2), kr, vr, attn_mask=mask,
                                                 enable_gqa=H != KV)  # [B, H, T, D]
            o = att.transpose(1, 2).reshape(B, T, H * D) @ layer["o"].t()
            x = x + self.all_reduce(o)
            h = self._rms(x, layer["post_norm"])
            gate, up = (h @ layer["gate_up"].t()).split(self.inter, dim=-1)
            x = x + self.all_reduce((F.silu(gate) * up) @ layer["down"].t())
        if take is not None:  # one position per row (a padded batch of prompts: each row's last real token)
            x = x[torch.arange(B, device=x.device), take].unsqueeze(1)
        elif last_only:
            x = x[:, -1:]
        return self._rms(x, self.norm) @ self.lm_head.t()
