"""Split-K GEMV for the batch-1 decode step's narrow projections (O: 2048 x 2048, down: 2048 x 8192 at Llama-1B).

At one row Inductor lowers ``x @ W.t()`` to a reduction kernel with one program per few output features; for the
narrow projections that is too few programs to keep HBM busy (the profile of the fused step measured 1.1 TB/s
for O and 2.5 TB/s for down, against 4.05 TB/s for gate/up). Here the grid is (output blocks, K slices): each
program reads a ``BLOCK_N x K/S`` tile of the weight once and adds its float32 partial sums into a float32 output
row with atomic adds (:func:`gemv_accumulate`; the caller zeroes the rows of a whole step with one memset), so the
consumer (the next compiled piece: residual add, then RMSNorm) reads one vector, as it reads a matmul's output.
(Handing it the ``[S, 1, N]`` partials instead made Inductor re-sum them in every program of the next projection's
kernel: measured on an H200, that cost what the GEMV saved.) The order of the atomic adds varies, so the float32
sum can differ in its last bits from run to run. With ``swiglu`` the input is the gate/up projection's output and
the kernel applies SwiGLU as it reads it, so the activation is never written.

``gemv_partials_ref`` is the same function in PyTorch (the CPU path, and what the device check compares with).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

try:  # Triton ships with CUDA builds of torch; the CPU path never needs it
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - CPU-only installs
    triton = None


class Plan(NamedTuple):
    """How one projection is split: ``splits`` slices of K, ``block_n`` outputs and ``block_k`` inputs a tile."""

    splits: int
    block_n: int
    block_k: int
    num_warps: int


def plan_for(n: int, k: int) -> Plan | None:
    """A split that gives the H200's 132 multiprocessors about four programs each; None where the shape does not
    divide (the caller keeps the plain matmul)."""
    block_n = next((b for b in (32, 16) if n % b == 0), None)
    block_k = next((b for b in (256, 128, 64, 32, 16) if k % b == 0), None)
    if block_n is None or block_k is None:
        return None
    splits = max(1, min(k // block_k, -(-4 * 132 // (n // block_n))))
    while (k // block_k) % splits:
        splits -= 1
    return Plan(splits, block_n, block_k, 4)


def gemv_partials_ref(x: torch.Tensor, w: torch.Tensor, splits: int, swiglu: bool = False) -> torch.Tensor:
    """``x [1, K]`` (``[1, 2K]`` gate then up with ``swiglu``) against ``w [N, K]``: float32 (float64 for a float64
    ``x``) partials ``[S, 1, N]`` whose sum over the first axis is ``x @ w.t()``."""
    dt = torch.promote_types(x.dtype, torch.float32)  # float32, or float64 for a float64 model (CPU tests)
    if swiglu:
        gate, up = x.to(dt).chunk(2, dim=-1)
        x = F.silu(gate) * up
    n, k = w.shape
    xs = x.to(dt).view(1, splits, k // splits).transpose(0, 1)             # [S, 1, K/S]
    ws = w.to(dt).view(n, splits, k // splits).permute(1, 2, 0)            # [S, K/S, N]
    return torch.bmm(xs, ws)


if triton is not None:

    @triton.jit
    def _gemv_kernel(X, W, P, N, K, s_wn, INTER, KS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     SWIGLU: tl.constexpr, ATOMIC: tl.constexpr):
        pid_n = tl.program_id(0)
        pid_s = tl.program_id(1)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        acc = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
        for k0 in range(0, KS, BLOCK_K):
            offs_k = pid_s * KS + k0 + tl.arange(0, BLOCK_K)
            if SWIGLU:
                g = tl.load(X + offs_k).to(tl.float32)
                u = tl.load(X + INTER + offs_k).to(tl.float32)
                x = g / (1.0 + tl.exp(-g)) * u
            else:
                x = tl.load(X + offs_k).to(tl.float32)
            w = tl.load(W + offs_n[:, None] * s_wn + offs_k[None, :])
            acc += w.to(tl.float32) * x[None, :]
        if ATOMIC:
            tl.atomic_add(P + offs_n, tl.sum(acc, 1))
        else:
            tl.store(P + pid_s * N + offs_n, tl.sum(acc, 1))


def gemv_partials_triton(x: torch.Tensor, w: torch.Tensor, plan: Plan, swiglu: bool = False) -> torch.Tensor:
    """The kernel itself (also runs under ``TRITON_INTERPRET=1`` on CPU tensors, which the tests use)."""
    n, k = w.shape
    assert x.shape[0] == 1 and x.is_contiguous() and w.stride(1) == 1, "one contiguous row against a row-major W"
    assert x.shape[1] == (2 * k if swiglu else k), (x.shape, w.shape, swiglu)
    out = torch.empty((plan.splits, 1, n), device=x.device, dtype=torch.float32)
    _gemv_kernel[(n // plan.block_n, plan.splits)](
        x, w, out, n, k, w.stride(0), k, KS=k // plan.splits, BLOCK_N=plan.block_n, BLOCK_K=plan.block_k,
        SWIGLU=swiglu, ATOMIC=False, num_warps=plan.num_warps)
    return out


def gemv_accumulate(x: torch.Tensor, w: torch.Tensor, plan: Plan, out: torch.Tensor, swiglu: bool = False) -> None:
    """``out [1, N]`` (float32) += ``x @ w.t()`` (SwiGLU of ``x`` first with ``swiglu``): the Triton kernel's atomic
    adds on CUDA, the reference's sum elsewhere."""
    if x.device.type != "cuda" or triton is None:
        out.add_(gemv_partials_ref(x, w, plan.splits, swiglu).sum(0))
        return
    gemv_accumulate_triton(x, w, plan, out, swiglu)


def gemv_accumulate_triton(x: torch.Tensor, w: torch.Tensor, plan: Plan, out: torch.Tensor, swiglu: bool = False
                           ) -> None:
    """The atomic-add kernel itself (also under ``TRITON_INTERPRET=1`` on CPU tensors)."""
    n, k = w.shape
    assert x.shape[0] == 1 and x.is_contiguous() and w.stride(1) == 1, "one contiguous row against a row-major W"
    assert x.shape[1] == (2 * k if swiglu else k), (x.shape, w.shape, swiglu)
    assert out.dtype == torch.float32 and out.is_contiguous() and out.numel() == n
    _gemv_kernel[(n // plan.block_n, plan.splits)](
        x, w, out, n, k, w.stride(0), k, KS=k // plan.splits, BLOCK_N=plan.block_n, BLOCK_K=plan.block_k,
        SWIGLU=swiglu, ATOMIC=True, num_warps=plan.num_warps)
