"""Decode attention over the KV cache: each row reads its keys and values only up to its own length.

The reference path (``decode_attention_ref``, CPU and GPU) is scaled-dot-product attention over the whole
preallocated context with a mask, so a batch of 64 short requests reads 64 full cache rows per layer. On
CUDA ``decode_attention`` is a Triton split-K kernel (flash-decoding): the grid is (rows, KV heads, splits),
each program handles the query heads of one KV head (GQA) over a slice of that row's own length, and a second
kernel merges the slices by their log-sum-exp. The grid depends on the batch size only, so it replays inside
a CUDA graph while the lengths change on the device. The device check compares it against the reference.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

try:  # Triton ships with CUDA builds of torch; the CPU path never needs it
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - CPU-only installs
    triton = None


def decode_attention_ref(q: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
    """``q [B, H, D]`` against cache rows ``kc, vc [B, KV, C, D]``, keys ``0 .. lens[b]-1``; returns ``[B, H, D]``."""
    B, H, _ = q.shape
    C = kc.shape[2]
    mask = torch.arange(C, device=q.device).view(1, 1, 1, C) < lens.view(B, 1, 1, 1)
    out = F.scaled_dot_product_attention(q.unsqueeze(2), kc, vc, attn_mask=mask, enable_gqa=H != kc.shape[1])
    return out.squeeze(2)


def splits_for(batch: int, kv_heads: int, sms: int = 132, most: int = 16) -> int:
    """Slices per row: enough programs to fill the multiprocessors twice over at small batch, one at large."""
    return max(1, min(most, -(-2 * sms // max(1, batch * kv_heads))))


if triton is not None:

    @triton.jit
    def _split_kernel(Q, K, V, Lens, Part, Lse, scale, s_qb, s_qh, s_kb, s_kh, s_kc, s_pb, s_ph, s_ps, s_lb, s_lh,
                      SPLITS: tl.constexpr, G: tl.constexpr, G_PAD: tl.constexpr, D: tl.constexpr,
                      BLOCK_N: tl.constexpr):
        b = tl.program_id(0)
        kvh = tl.program_id(1)
        s = tl.program_id(2)
        length = tl.load(Lens + b).to(tl.int32)
        chunk = tl.cdiv(tl.cdiv(length, SPLITS), BLOCK_N) * BLOCK_N
        start = s * chunk
        end = tl.minimum(start + chunk, length)
        offs_g = tl.arange(0, G_PAD)
        offs_d = tl.arange(0, D)
        offs_n = tl.arange(0, BLOCK_N)
        heads = kvh * G + offs_g
        gmask = offs_g < G
        q = tl.load(Q + b * s_qb + heads[:, None] * s_qh + offs_d[None, :], mask=gmask[:, None], other=0.0)
        m = tl.full([G_PAD], float("-inf"), tl.float32)
        ssum = tl.zeros([G_PAD], tl.float32)
        acc = tl.zeros([G_PAD, D], tl.float32)
        kbase = K + b * s_kb + kvh * s_kh
        vbase = V + b * s_kb + kvh * s_kh
        for n0 in range(start, end, BLOCK_N):
            n = n0 + offs_n
            nmask = n < end
            k = tl.load(kbase + n[:, None] * s_kc + offs_d[None, :], mask=nmask[:, None], other=0.0)
            qk = tl.dot(q, tl.trans(k)) * scale
            qk = tl.where(nmask[None, :], qk, float("-inf"))
            m_new = tl.maximum(m, tl.max(qk, 1))
            p = tl.exp(qk - m_new[:, None])
            alpha = tl.exp(m - m_new)
            ssum = ssum * alpha + tl.sum(p, 1)
            v = tl.load(vbase + n[:, None] * s_kc + offs_d[None, :], mask=nmask[:, None], other=0.0)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            m = m_new
        safe = tl.where(ssum > 0, ssum, 1.0)
        out = acc / safe[:, None]
        lse = tl.where(ssum > 0, m + tl.log(safe), float("-inf"))
        tl.store(Part + b * s_pb + heads[:, None] * s_ph + s * s_ps + offs_d[None, :], out, mask=gmask[:, None])
        tl.store(Lse + b * s_lb + heads * s_lh + s, lse, mask=gmask)

    @triton.jit
    def _merge_kernel(Part, Lse, Out, s_pb, s_ph, s_ps, s_lb, s_lh, s_ob, s_oh,
                      SPLITS: tl.constexpr, S_PAD: tl.constexpr, D: tl.constexpr):
        b = tl.program_id(0)
        h = tl.program_id(1)
        offs_s = tl.arange(0, S_PAD)
        offs_d = tl.arange(0, D)
        smask = offs_s < SPLITS
        lse = tl.load(Lse + b * s_lb + h * s_lh + offs_s, mask=smask, other=float("-inf"))
        w = tl.exp(lse - tl.max(lse, 0))
        w = w / tl.sum(w, 0)
        part = tl.load(Part + b * s_pb + h * s_ph + offs_s[:, None] * s_ps + offs_d[None, :], mask=smask[:, None],
                       other=0.0)
        out = tl.sum(part * w[:, None], 0)
        tl.store(Out + b * s_ob + h * s_oh + offs_d, out.to(Out.dtype.element_ty))


def decode_attention(q: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, lens: torch.Tensor,
                     splits: int | None = None) -> torch.Tensor:
    """The Triton kernels on CUDA (same contract as :func:`decode_attention_ref`); the reference elsewhere."""
    if q.device.type != "cuda" or triton is None:
        return decode_attention_ref(q, kc, vc, lens)
    B, H, D = q.shape
    KV = kc.shape[1]
    G = H // KV
    S = splits or splits_for(B, KV)
    part = torch.empty((B, H, S, D), device=q.device, dtype=torch.float32)
    lse = torch.empty((B, H, S), device=q.device, dtype=torch.float32)
    out = torch.empty((B, H, D), device=q.device, dtype=q.dtype)
    _split_kernel[(B, KV, S)](
        q, kc, vc, lens, part, lse, D ** -0.5, q.stride(0), q.stride(1), kc.stride(0), kc.stride(1), kc.stride(2),
        part.stride(0), part.stride(1), part.stride(2), lse.stride(0), lse.stride(1),
        SPLITS=S, G=G, G_PAD=max(16, triton.next_power_of_2(G)), D=D, BLOCK_N=32, num_warps=4, num_stages=2)
    _merge_kernel[(B, H)](part, lse, out, part.stride(0), part.stride(1), part.stride(2), lse.stride(0),
                          lse.stride(1), out.stride(0), out.stride(1),
                          SPLITS=S, S_PAD=max(2, triton.next_power_of_2(S)), D=D, num_warps=1)
    return out
