"""The fused decode step and the length-aware attention against the reference forward (CPU, tiny shape).

On the CPU the fused pieces run uncompiled and attention takes its reference; the device check
(``python -m framework.servers.gpu.check --fused``) compares the compiled and Triton versions the same way.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the GPU server needs torch (pip install -e '.[gpu]')")
pytestmark = pytest.mark.gpu  # the GPU server on the CPU (torch): its own tier, `pytest -m gpu`

from framework.servers.gpu import shapes  # noqa: E402
from framework.servers.gpu.attention import decode_attention, decode_attention_ref, splits_for  # noqa: E402
from framework.servers.gpu.comm import TPGroup  # noqa: E402
from framework.servers.gpu.executor import Executor  # noqa: E402
from framework.servers.gpu.fused import FusedDecoder  # noqa: E402
from framework.servers.gpu.model import Llama  # noqa: E402

TINY = shapes.PRESETS["tiny"]


def _naive(q, kc, vc, lens):
    """Softmax attention written out, one row and head at a time, in float64."""
    B, H, D = q.shape
    G = H // kc.shape[1]
    out = torch.empty(B, H, D, dtype=torch.float64)
    for b in range(B):
        n = int(lens[b])
        for h in range(H):
            k, v = kc[b, h // G, :n].double(), vc[b, h // G, :n].double()
            w = torch.softmax(k @ q[b, h].double() / D ** 0.5, dim=0)
            out[b, h] = w @ v
    return out


def test_decode_attention_reads_each_row_up_to_its_own_length():
    g = torch.Generator().manual_seed(7)
    B, H, KV, C, D = 3, 4, 2, 40, 8
    q, kc, vc = (torch.randn(*s, generator=g) for s in ((B, H, D), (B, KV, C, D), (B, KV, C, D)))
    lens = torch.tensor([1, 17, 40])
    ref = _naive(q, kc, vc, lens)
    for fn in (decode_attention_ref, decode_attention):  # on the device, check.py poisons past the lengths too
        assert torch.allclose(fn(q, kc, vc, lens).double(), ref, atol=1e-5), fn.__name__


def test_splits_fill_the_chip_at_batch_one_and_stop_at_one():
    assert splits_for(1, 8) == 16 and splits_for(64, 8) == 1 and splits_for(4, 8) == 9


@pytest.mark.parametrize("seed", [0, 1])
def test_fused_step_equals_the_reference_forward_and_writes_the_same_cache(seed):
    model = Llama(TINY, seed=seed, context=32)
    ref_cache, fused_cache = model.new_cache(4), model.new_cache(4)
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(0, TINY.vocab_size, (n,), generator=g).tolist() for n in (5, 9, 2, 13)]
    fused = FusedDecoder(model, compile_mode="none")
    with torch.inference_mode():
        for row, ids in enumerate(prompts):
            t = torch.tensor([ids])
            p = torch.arange(len(ids)).unsqueeze(0)
            for cache in (ref_cache, fused_cache):
                model(t, p, cache, row0=row)
        tokens = torch.randint(0, TINY.vocab_size, (4,), generator=g)
        positions = torch.tensor([len(ids) for ids in prompts])
        for _ in range(3):
            logits = model(tokens.unsqueeze(1), positions.unsqueeze(1), ref_cache)
            want = logits[:, -1].argmax(-1)
            got = fused.step(tokens, positions, fused_cache)
            assert torch.equal(got, want)
            for a, b in zip(ref_cache.k + ref_cache.v, fused_cache.k + fused_cache.v, strict=True):
                assert torch.allclose(a, b, atol=1e-6)
            tokens, positions = want, positions + 1


def test_executor_decodes_the_same_tokens_fused_or_not():
    runs = []
    for fused in (False, True):
        ex = Executor(TINY, seed=5, group=TPGroup(), dtype=torch.float32, context=48, max_rows=3, fused=fused,
                      compile_mode="none")
        assert (ex.fused is not None) == fused
        firsts = [ex.prefill(r, list(range(3 + r, 9 + 2 * r))) for r in range(3)]
        out = [ex.step(firsts, [6, 7, 8])]
        out.append(ex.step([o[0] for o in out[-1]], [7, 8, 9]))
        runs.append((firsts, out))
    assert runs[0] == runs[1]


def test_fused_needs_one_process_and_a_known_compile_mode():
    with pytest.raises(ValueError, match="TP1"):
        FusedDecoder(Llama(TINY, seed=0, tp_rank=0, tp_size=2, context=16))
    with pytest.raises(ValueError, match="compile_mode"):
        FusedDecoder(Llama(TINY, seed=0, context=16), compile_mode="fast")


def test_split_k_partials_sum_to_the_projection_with_and_without_swiglu():
    from framework.servers.gpu.gemv import gemv_partials_ref, plan_for

    g = torch.Generator().manual_seed(3)
    w = torch.randn(64, 512, generator=g, dtype=torch.float64)
    for swiglu in (False, True):
        x = torch.randn(1, 1024 if swiglu else 512, generator=g, dtype=torch.float64)
        act = torch.nn.functional.silu(x[:, :512]) * x[:, 512:] if swiglu else x
        for splits in (1, 2, 8):
            parts = gemv_partials_ref(x, w, splits, swiglu)
            assert parts.shape == (splits, 1, 64)
            assert torch.allclose(parts.sum(0).double(), (act @ w.t()), rtol=1e-5, atol=1e-4)
    assert plan_for(2048, 8192).splits == 8 and plan_for(2048, 2048).splits == 8 and plan_for(60, 512) is None


@pytest.mark.parametrize("splits", [(1, 1), (2, 4)])
def test_batch1_split_k_step_equals_the_reference_forward(splits):
    from framework.servers.gpu.gemv import Plan

    model = Llama(TINY, seed=4, context=32)
    ref_cache, fused_cache = model.new_cache(1), model.new_cache(1)
    fused = FusedDecoder(model, compile_mode="none", batch1_gemv="split-k")
    assert fused.batch1_gemv == "split-k"
    fused.plans = (Plan(splits[0], 16, 16, 4), Plan(splits[1], 16, 16, 4))
    ids = torch.tensor([[5, 9, 2, 13, 7]])
    with torch.inference_mode():
        for cache in (ref_cache, fused_cache):
            model(ids, torch.arange(5).unsqueeze(0), cache)
        tokens, positions = torch.tensor([3]), torch.tensor([5])
        for _ in range(4):
            want = model(tokens.unsqueeze(1), positions.unsqueeze(1), ref_cache)[:, -1]
            got = fused.step(tokens, positions, fused_cache)
            assert torch.equal(got, want.argmax(-1))
            for a, b in zip(ref_cache.k + ref_cache.v, fused_cache.k + fused_cache.v, strict=True):
                assert torch.allclose(a, b, atol=1e-5)
            tokens, positions = got, positions + 1
    assert FusedDecoder(model, compile_mode="none").plans is None  # the default: inside the compiled pieces
    with pytest.raises(ValueError, match="batch1_gemv"):
        FusedDecoder(model, compile_mode="none", batch1_gemv="cublas")


def test_the_split_k_kernel_under_the_triton_interpreter(tmp_path):
    """Where Triton is installed (CUDA builds of torch), its interpreter runs the kernel on CPU tensors."""
    pytest.importorskip("triton")
    import os
    import subprocess
    import sys

    code = (
        "import torch\n"
        "from framework.servers.gpu.gemv import gemv_accumulate_triton, gemv_partials_ref, gemv_partials_triton, "
        "plan_for\n"
        "g = torch.Generator().manual_seed(1)\n"
        "for n, k, sw in ((64, 512, False), (64, 1024, True), (2048, 2048, False)):\n"
        "    p = plan_for(n, k)\n"
        "    w, x = torch.randn(n, k, generator=g), torch.randn(1, 2 * k if sw else k, generator=g)\n"
        "    a, b = gemv_partials_triton(x, w, p, sw), gemv_partials_ref(x, w, p.splits, sw)\n"
        "    assert torch.allclose(a, b, rtol=1e-4, atol=1e-3), (n, k, sw, (a - b).abs().max())\n"
        "    acc = torch.full((1, n), 0.5)\n"
        "    gemv_accumulate_triton(x, w, p, acc, sw)\n"
        "    assert torch.allclose(acc, b.sum(0) + 0.5, rtol=1e-4, atol=1e-3), (n, k, sw)\n"
        "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "TRITON_INTERPRET": "1"})
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
