"""Real weights for the GPU server: a Hugging Face Llama directory's safetensors, loaded into :class:`Llama`.

``--model-path DIR`` with ``config.json`` gives the shape (``shapes.resolve``: ``rope_theta`` and
``rms_norm_eps`` come from it too); when ``DIR`` also holds ``*.safetensors`` the weights are those, not
the seeded random draw: Hugging Face's names (``model.layers.N.self_attn.q_proj.weight``, ...) go into the
decoder's fused layout (``qkv`` = [q; k; v], ``gate_up`` = [gate; up]), each rank keeping its Megatron slice
as it does for random weights, in the server's dtype. ``tie_word_embeddings`` (SmolLM2) makes the LM head
the embedding; an untied checkpoint has ``lm_head.weight``. A missing or mis-shaped tensor is an error
naming it (the server exits 1 at start-up, before ``/health`` says ready).

A text prompt needs the model's own tokenizer once the weights are real: :func:`tokenizer` loads it from
the directory (``transformers``) when it has ``tokenizer.json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import torch

from framework.servers.gpu.model import Llama


def has_weights(model_path: str) -> bool:
    """Whether ``model_path`` is a directory with a config and safetensors weights (real weights)."""
    d = Path(model_path)
    return (d / "config.json").is_file() and any(d.glob("*.safetensors"))


def read_tensors(directory: str | Path) -> dict[str, torch.Tensor]:
    """Every tensor of the directory's ``*.safetensors`` files, on the CPU, by name."""
    from safetensors.torch import load_file

    out: dict[str, torch.Tensor] = {}
    for f in sorted(Path(directory).glob("*.safetensors")):
        out.update(load_file(str(f)))
    return out


def load_into(model: Llama, directory: str | Path) -> dict[str, Any]:
    """Replace ``model``'s weights by the directory's (this rank's slices, the model's device and dtype).

    Returns what the record says about them: the directory, its conversion digest when it has one, and
    whether the embeddings are tied."""
    config = json.loads((Path(directory) / "config.json").read_text(encoding="utf-8"))
    tensors = read_tensors(directory)
    s, r, n = model.shape, model.tp_rank, model.tp_size

    def get(name: str, shape: tuple[int, ...]) -> torch.Tensor:
        if name not in tensors:
            raise ValueError(f"{directory}: no tensor {name!r} in its safetensors")
        t = tensors[name]
        if tuple(t.shape) != shape:
            raise ValueError(f"{directory}: {name} has shape {tuple(t.shape)}, config.json implies {shape}")
        return t.to(device=model.device, dtype=model.dtype)

    def part(t: torch.Tensor, dim: int) -> torch.Tensor:
        return t.chunk(n, dim=dim)[r].contiguous()

    h, d, inter = s.hidden_size, s.dim_head, s.intermediate_size
    qh, kvh = s.num_attention_heads * d, s.num_key_value_heads * d
    model.embed = get("model.embed_tokens.weight", (s.vocab_size, h))
    tied = bool(config.get("tie_word_embeddings", False)) and "lm_head.weight" not in tensors
    model.lm_head = model.embed if tied else get("lm_head.weight", (s.vocab_size, h))
    model.norm = get("model.norm.weight", (h,))
    for i, layer in enumerate(model.layers):
        p = f"model.layers.{i}."
        q = part(get(p + "self_attn.q_proj.weight", (qh, h)), 0)
        k = part(get(p + "self_attn.k_proj.weight", (kvh, h)), 0)
        v = part(get(p + "self_attn.v_proj.weight", (kvh, h)), 0)
        gate = part(get(p + "mlp.gate_proj.weight", (inter, h)), 0)
        up = part(get(p + "mlp.up_proj.weight", (inter, h)), 0)
        layer.update({
            "qkv": torch.cat([q, k, v]).contiguous(),
            "o": part(get(p + "self_attn.o_proj.weight", (h, qh)), 1),
            "gate_up": torch.cat([gate, up]).contiguous(),
            "down": part(get(p + "mlp.down_proj.weight", (h, inter)), 1),
            "in_norm": get(p + "input_layernorm.weight", (h,)),
            "post_norm": get(p + "post_attention_layernorm.weight", (h,)),
        })
    return {"weights": "safetensors", "path": str(directory), "tied_embeddings": tied,
            "conversion_digest": conversion_digest(directory)}


def conversion_digest(directory: str | Path) -> str | None:
    """The directory's digest when framework.assets.smollm2_hf wrote it (its manifest), else None."""
    try:
        data = json.loads((Path(directory) / "framework-conversion.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data.get("digest") if isinstance(data, dict) else None


def tokenizer(directory: str | Path) -> Callable[[str], list[int]] | None:
    """The directory's tokenizer as ``text -> ids`` (no special tokens added), or None when it has none."""
    if not (Path(directory) / "tokenizer.json").is_file():
        return None
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(directory))
    return lambda text: list(tok(text, add_special_tokens=False)["input_ids"])
