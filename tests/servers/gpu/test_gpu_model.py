"""The decoder and executor on CPU with the tiny shape: cache, verify pass and tensor parallelism are exact."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the GPU server needs torch (pip install -e '.[gpu]')")
pytestmark = pytest.mark.gpu  # the GPU server on the CPU (torch): its own tier, `pytest -m gpu`

from cli_helpers import ROOT  # noqa: E402

from framework.servers.gpu import shapes  # noqa: E402
from framework.servers.gpu.comm import TPGroup  # noqa: E402
from framework.servers.gpu.executor import Executor, graph_batch_sizes  # noqa: E402
from framework.servers.gpu.model import Llama  # noqa: E402

TINY = shapes.PRESETS["tiny"]
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs and symmetric memory need a GPU "
                          "(exercised on the device by benchmarks/gpu/run_device.sh)")


@pytest.fixture(scope="module")
def model() -> Llama:
    return Llama(TINY, seed=3, context=64)


def test_kv_cache_decode_matches_full_recompute(model):
    tokens = torch.randint(0, TINY.vocab_size, (2, 14), generator=torch.Generator().manual_seed(0))
    full = model(tokens, torch.arange(14).expand(2, 14), model.new_cache(4), row0=1)
    cache = model.new_cache(4)
    model(tokens[:, :8], torch.arange(8).expand(2, 8), cache)
    steps = [model(tokens[:, i:i + 1], torch.full((2, 1), i), cache) for i in range(8, 14)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full[:, 8:], rtol=1e-4, atol=1e-4)


def test_verify_pass_matches_token_by_token_decode(model):
    tokens = torch.randint(0, TINY.vocab_size, (3, 12), generator=torch.Generator().manual_seed(1))
    a, b = model.new_cache(3), model.new_cache(3)
    for cache in (a, b):
        model(tokens[:, :8], torch.arange(8).expand(3, 8), cache)
    verify = model(tokens[:, 8:12], (8 + torch.arange(4)).expand(3, 4), a)
    one_by_one = torch.cat([model(tokens[:, i:i + 1], torch.full((3, 1), i), b) for i in range(8, 12)], dim=1)
    torch.testing.assert_close(verify, one_by_one, rtol=1e-4, atol=1e-4)


def test_rows_are_independent_and_move_with_their_cache(model):
    """A request's logits do not depend on its row or its neighbours; moving a row keeps its past."""
    tokens = torch.randint(0, TINY.vocab_size, (1, 10), generator=torch.Generator().manual_seed(2))
    ref = model(tokens, torch.arange(10)[None], model.new_cache(1))[:, -1]
    cache = model.new_cache(4)
    model(tokens[:, :9], torch.arange(9)[None], cache, row0=3)
    cache.move_row(3, 0)
    out = model(tokens[:, 9:], torch.tensor([[9]]), cache, row0=0)[:, -1]
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)


def test_weights_are_seeded_and_the_seed_matters():
    a, b, c = (Llama(TINY, seed=s, context=16) for s in (5, 5, 6))
    assert torch.equal(a.layers[0]["qkv"], b.layers[0]["qkv"])
    assert not torch.equal(a.layers[0]["qkv"], c.layers[0]["qkv"])


def test_speculative_step_emits_drafts_then_the_target_tokens():
    ex = Executor(TINY, seed=3, group=TPGroup(), dtype=torch.float32, context=64, max_rows=4, draft_tokens=4)
    prompt = list(range(5, 15))
    first = ex.prefill(0, prompt)
    (out,) = ex.step([first], [len(prompt)])
    drafts, verified = out[:3], out[3:]
    assert len(verified) == 4
    # the verify pass scores [first, d1, d2, d3]: its first token is the target's greedy next token
    ref = Executor(TINY, seed=3, group=TPGroup(), dtype=torch.float32, context=64, max_rows=4)
    ref_first = ref.prefill(0, prompt)
    assert ref_first == first
    assert ref.step([first], [len(prompt)]) == [[verified[0]]]
    assert all(0 <= t < TINY.vocab_size for t in drafts)


def test_shapes_presets_config_dirs_and_clear_errors(tmp_path):
    assert shapes.resolve("meta-llama/Llama-3.1-8B").num_hidden_layers == 32
    assert 1.0e9 < shapes.PRESETS["llama-1b"].params() < 1.6e9
    assert 7.5e9 < shapes.PRESETS["llama-8b"].params() < 8.5e9
    (tmp_path / "config.json").write_text(TINY.model_dump_json())
    assert shapes.resolve(str(tmp_path)).hidden_size == TINY.hidden_size
    with pytest.raises(shapes.ShapeError, match="llama-1b"):
        shapes.resolve("no-such-model")
    with pytest.raises(ValueError, match="not divisible by tp_size=3"):
        Llama(TINY, seed=0, tp_size=3)
    assert graph_batch_sizes(64) == [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64]
    assert graph_batch_sizes(6) == [1, 2, 4, 6]


def _check(tmp_path: Path, name: str, *args: str) -> dict:
    out = tmp_path / f"{name}.pt"
    subprocess.run(
        [sys.executable, "-m", "framework.servers.gpu.check", "--out", str(out), *args],
        cwd=ROOT,
        check=True,
        timeout=180,
        env={"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"},
    )
    return torch.load(out)


def test_two_process_tensor_parallelism_over_gloo_matches_one_process(tmp_path):
    from argparse import Namespace

    from framework.servers.gpu.check import run_rank

    run_rank(0, Namespace(model_path="tiny", tp_size=1, device="cpu", symm_mem=False, graphs=False, seed=0, verbose=0,
                          out=str(tmp_path / "tp1.pt")), "")
    one = torch.load(tmp_path / "tp1.pt")
    two = _check(tmp_path, "tp2", "--tp-size", "2")
    assert two["impl"] == "gloo"
    torch.testing.assert_close(two["logits"], one["logits"], rtol=1e-4, atol=1e-4)
    assert (two["firsts"], two["steps"]) == (one["firsts"], one["steps"])


@CUDA
def test_graphs_and_symmetric_memory_match_eager_one_gpu(tmp_path):  # pragma: no cover - GPU only
    one = _check(tmp_path, "tp1", "--device", "cuda")
    graphs = _check(tmp_path, "g", "--device", "cuda", "--graphs")
    assert graphs["steps"] == one["steps"]
    if torch.cuda.device_count() >= 2:
        symm = _check(tmp_path, "s", "--device", "cuda", "--tp-size", "2", "--symm-mem", "--graphs")
        assert symm["impl"] == "symm_mem_one_shot"
        torch.testing.assert_close(symm["logits"], one["logits"], rtol=5e-2, atol=5e-2)
