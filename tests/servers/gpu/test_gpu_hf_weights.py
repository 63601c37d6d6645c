"""hf_weights: a HF Llama directory's safetensors go into the decoder's fused layout (tiny shape, CPU, no asset)."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch", reason="the GPU server needs torch (pip install -e '.[gpu]')")
pytest.importorskip("safetensors", reason="real weights need safetensors (pip install -e '.[gpu]')")
pytestmark = pytest.mark.gpu  # the GPU server on the CPU (torch): its own tier, `pytest -m gpu`

from safetensors.torch import save_file  # noqa: E402

from framework.servers.gpu import hf_weights, shapes  # noqa: E402
from framework.servers.gpu.model import Llama  # noqa: E402

TINY = shapes.PRESETS["tiny"]


def _as_hf(model: Llama, tied: bool) -> dict[str, torch.Tensor]:
    """The model's weights under Hugging Face's names (split back out of qkv and gate_up)."""
    s, d = model.shape, model.head_dim
    out = {"model.embed_tokens.weight": model.embed, "model.norm.weight": model.norm + 0.5}
    if not tied:
        out["lm_head.weight"] = model.lm_head
    for i, layer in enumerate(model.layers):
        q, k, v = layer["qkv"].split([s.num_attention_heads * d, s.num_key_value_heads * d,
                                      s.num_key_value_heads * d])
        gate, up = layer["gate_up"].split(s.intermediate_size)
        p = f"model.layers.{i}."
        out.update({p + "self_attn.q_proj.weight": q, p + "self_attn.k_proj.weight": k,
                    p + "self_attn.v_proj.weight": v, p + "self_attn.o_proj.weight": layer["o"],
                    p + "mlp.gate_proj.weight": gate, p + "mlp.up_proj.weight": up,
                    p + "mlp.down_proj.weight": layer["down"],
                    p + "input_layernorm.weight": layer["in_norm"] * 0.9,
                    p + "post_attention_layernorm.weight": layer["post_norm"] * 1.1})
    return {k: v.contiguous().clone() for k, v in out.items()}


def _write(tmp_path, tensors: dict[str, torch.Tensor], tied: bool):
    config = {**TINY.model_dump(exclude={"name", "head_dim"}), "tie_word_embeddings": tied}
    (tmp_path / "config.json").write_text(json.dumps(config))
    save_file(tensors, str(tmp_path / "model.safetensors"))
    return tmp_path


@pytest.mark.parametrize("tied", [False, True])
def test_loaded_weights_compute_the_written_model(tmp_path, tied):
    src = Llama(TINY, seed=5, context=32)
    tensors = _as_hf(src, tied)
    d = _write(tmp_path, tensors, tied)
    assert hf_weights.has_weights(str(d)) and not hf_weights.has_weights(str(tmp_path / "none"))
    # the source model as the directory describes it: norms changed, LM head tied or its own
    src.norm = tensors["model.norm.weight"]
    for i, layer in enumerate(src.layers):
        layer["in_norm"] = tensors[f"model.layers.{i}.input_layernorm.weight"]
        layer["post_norm"] = tensors[f"model.layers.{i}.post_attention_layernorm.weight"]
    if tied:
        src.lm_head = src.embed
    dst = Llama(shapes.resolve(str(d)), seed=0, context=32, random_init=False)
    info = hf_weights.load_into(dst, d)
    assert info["tied_embeddings"] is tied and info["conversion_digest"] is None
    tokens = torch.randint(0, TINY.vocab_size, (2, 9), generator=torch.Generator().manual_seed(0))
    pos = torch.arange(9).expand(2, 9)
    torch.testing.assert_close(dst(tokens, pos, dst.new_cache(2)), src(tokens, pos, src.new_cache(2)))


def test_a_missing_or_misshaped_tensor_is_named(tmp_path):
    tensors = _as_hf(Llama(TINY, seed=5, context=32), tied=False)
    tensors["model.layers.1.mlp.up_proj.weight"] = tensors["model.layers.1.mlp.up_proj.weight"][:-1].clone()
    d = _write(tmp_path, tensors, tied=False)
    with pytest.raises(ValueError, match=r"model.layers.1.mlp.up_proj.weight has shape \(127, 64\)"):
        hf_weights.load_into(Llama(TINY, seed=0, context=32), d)
    del tensors["model.layers.1.mlp.up_proj.weight"]
    save_file(tensors, str(d / "model.safetensors"))
    with pytest.raises(ValueError, match="no tensor 'model.layers.1.mlp.up_proj.weight'"):
        hf_weights.load_into(Llama(TINY, seed=0, context=32), d)
