"""Model shapes for ``--model-path``: named presets or a Hugging Face ``config.json`` directory (pure data).

The weights are random (seeded), so only the shape matters for speed: the presets follow Llama-3.2-1B and
Llama-3.1-8B, ``tiny`` keeps CPU tests to milliseconds, and ``draft`` is the one-layer draft model that
proposes tokens for the speculative verify pass (EAGLE's draft head is one decoder layer too).
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field


class Shape(BaseModel):
    """A Llama-architecture decoder's shape (Hugging Face ``LlamaConfig`` field names)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    name: str = "custom"
    hidden_size: int = Field(ge=8)
    intermediate_size: int = Field(ge=8)
    num_hidden_layers: int = Field(ge=1)
    num_attention_heads: int = Field(ge=1)
    num_key_value_heads: int = Field(ge=1)
    vocab_size: int = Field(ge=16)
    rms_norm_eps: float = 1e-5
    rope_theta: float = 500000.0
    head_dim: int | None = None

    @property
    def dim_head(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    def params(self) -> int:
        """Parameter count (embedding and LM head counted separately, as untied Llamas have them)."""
        h, d = self.hidden_size, self.dim_head
        attn = h * d * (self.num_attention_heads + 2 * self.num_key_value_heads) + self.num_attention_heads * d * h
        mlp = 3 * h * self.intermediate_size
        return self.num_hidden_layers * (attn + mlp + 2 * h) + 2 * self.vocab_size * h + h


PRESETS: dict[str, Shape] = {
    "tiny": Shape(name="tiny", hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=512),
    "llama-1b": Shape(name="llama-1b", hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                      num_attention_heads=32, num_key_value_heads=8, vocab_size=128256, head_dim=64),
    "llama-8b": Shape(name="llama-8b", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=8, vocab_size=128256, head_dim=128),
}
ALIASES = {"meta-llama/Llama-3.2-1B": "llama-1b", "meta-llama/Llama-3.2-1B-Instruct": "llama-1b",
           "meta-llama/Llama-3.1-8B": "llama-8b", "meta-llama/Llama-3.1-8B-Instruct": "llama-8b"}


class ShapeError(ValueError):
    pass


def resolve(model_path: str) -> Shape:
    """A preset name (or a Hugging Face name of one), or a directory holding a Llama ``config.json``."""
    name = ALIASES.get(model_path, model_path)
    if name in PRESETS:
        return PRESETS[name]
    cfg = Path(model_path) / "config.json"
    if cfg.is_file():
        try:
            data = json.loads(cfg.read_text())
            return Shape(**{**data, "name": Path(model_path).name})
        except (ValueError, TypeError) as exc:
            raise ShapeError(f"{cfg}: not a Llama config: {exc}") from None
    raise ShapeError(f"unknown model {model_path!r}: use one of {sorted(PRESETS)} or a directory with config.json")


def draft_shape(target: Shape) -> Shape:
    """The draft model: one decoder layer at the target's width and vocabulary (EAGLE's draft head shape)."""
    return target.model_copy(update={"name": f"{target.name}-draft", "num_hidden_layers": 1})
