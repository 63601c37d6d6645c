"""A tiny Llama model with seeded random weights, as a Hugging Face folder: a real vLLM server with no download.

`write_tiny_hf(path, seed)` writes what `vllm serve DIR` (and SGLang) load: `config.json`,
`generation_config.json`, `model.safetensors` and a byte-level BPE tokenizer (`tokenizer.json`,
`tokenizer_config.json`, `special_tokens_map.json`) trained by `tokenizers` on a corpus drawn from
the seed. The same seed gives the same bytes (the vLLM tier checks the sha256 of every file);
nothing is downloaded. Shape: `LlamaForCausalLM`, 2 layers, hidden 64, 2 heads of 32 (1 KV head),
feed-forward 128, context 2048, float32; the vocabulary is the tokenizer's (315 ids for seed 0:
the bytes of printable ASCII, the two special tokens and the corpus's merges), about 0.1M
parameters (a 0.46 MB safetensors file).

Two choices make it a benchmark model rather than a language model, and both are deliberate:
the corpus, and so the vocabulary, is printable ASCII only (every token decodes to whole
characters, so a streamed token is never held back as an incomplete UTF-8 sequence), and it is
made of the words the client's `prompt: text` workloads send (`framework.core.workload.TEXT_WORDS`),
so one such word is one token, as in the usual BPE vocabularies. The weights are random; the text
is noise. It exercises vLLM's real scheduler, KV cache, prefix cache and HTTP server at a size two
CPU cores run quickly.

It needs `torch`, `transformers` and `tokenizers` (a vLLM venv has them; the project's does not):

    python -m framework.assets.tiny_hf models/tiny-hf --seed 0
"""

from __future__ import annotations

import argparse
import string
import sys
from pathlib import Path
from typing import Any

import numpy as np

from framework.core.hashing import sha256_file
from framework.core.workload import TEXT_WORDS

# vLLM's CPU attention takes head sizes of 32 and up (16, from 4 heads of 64, fails at the first request)
LAYERS, HIDDEN, HEADS, KV_HEADS, FFN, CONTEXT = 2, 64, 2, 1, 128, 2048
VOCAB = 2048  # the trainer's cap; the corpus's merges run out well below it and the model takes the real size
BOS, EOS = "<s>", "</s>"
CORPUS_WORDS = 1500  # about 6 KB of text


def corpus(seed: int) -> str:
    """Seeded text: lines of the client's words, then every printable ASCII character (so any ASCII tokenizes)."""
    rng = np.random.default_rng([seed, 0x70C])
    words = [TEXT_WORDS[int(i)] for i in rng.integers(0, len(TEXT_WORDS), size=CORPUS_WORDS)]
    lines = [" ".join(words[i:i + 12]) for i in range(0, len(words), 12)]
    return "\n".join(lines) + "\n" + " ".join(string.printable.strip()) + "\n"


def train_tokenizer(text: str) -> Any:
    """A byte-level BPE `tokenizers.Tokenizer` trained on `text` alone (its own bytes as the alphabet)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, min_frequency=2, special_tokens=[BOS, EOS],
                                  initial_alphabet=[], show_progress=False)
    tok.train_from_iterator(text.splitlines(), trainer=trainer)
    return tok


def write_tiny_hf(path: Path, seed: int = 0) -> dict[str, str]:
    """Write the model folder for `seed` to `path`; returns {file name: sha256}."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    tok = train_tokenizer(corpus(seed))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS, eos_token=EOS, model_max_length=CONTEXT)
    fast.chat_template = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                          "{% if add_generation_prompt %}assistant:{% endif %}")
    config = LlamaConfig(
        vocab_size=tok.get_vocab_size(), hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=CONTEXT,
        bos_token_id=tok.token_to_id(BOS), eos_token_id=tok.token_to_id(EOS), tie_word_embeddings=False,
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path, safe_serialization=True)
    fast.save_pretrained(path)
    return {p.name: sha256_file(p) for p in sorted(path.iterdir()) if p.is_file()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m framework.assets.tiny_hf", description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path, help="the folder to write (config, weights, tokenizer)")
    parser.add_argument("--seed", type=int, default=0, help="weights and corpus seed (same seed, same bytes)")
    args = parser.parse_args(argv)
    try:
        digests = write_tiny_hf(args.path, args.seed)
    except ImportError as exc:
        print(f"error: {exc.name} is needed (torch, transformers, tokenizers; a vLLM venv has them)", file=sys.stderr)
        return 2
    for name, digest in digests.items():
        print(f"{args.path / name}  {(args.path / name).stat().st_size} bytes  sha256 {digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
