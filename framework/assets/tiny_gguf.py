"""A tiny Llama model with seeded random weights, as a GGUF file: a real llama.cpp server with no download.

`tiny_llama(seed)` is pure: the same seed gives the same tensors and vocabulary, and `write_gguf`
writes them in a fixed order, so the same seed gives the same bytes (tests check the sha256).
Shape: 4 layers, hidden 256, 4 heads, feed-forward 512, vocabulary 512, context 2048, f16
(about 5.8 MB). The vocabulary is a SentencePiece-style byte-fallback one: `<unk>`, `<s>`, `</s>`,
the 256 byte tokens `<0x00>`..`<0xFF>`, then 253 ASCII pieces, so any prompt text tokenizes.

Two choices make it a benchmark model rather than a language model, and both are deliberate:
the output rows of the special and byte tokens are zero, so greedy decoding never ends early at
EOS and every generated token is printable text (each streamed chunk carries one token, which is
what the client counts). The weights are random; the text is noise. What it is for is exercising
llama.cpp's real kernels, threads, KV cache and HTTP server at a size two CPU cores run quickly.

    python -m framework.assets.tiny_gguf models/tiny-llama.gguf --seed 0
"""

from __future__ import annotations

import argparse
import string
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from framework.core.hashing import sha256_file

LAYERS, HIDDEN, HEADS, FFN, VOCAB, CONTEXT = 4, 256, 4, 512, 512, 2048
SPECIAL = ("<unk>", "<s>", "</s>")
UNK, BOS, EOS = 0, 1, 2
# gguf's llama token types: 1 normal, 2 unknown, 3 control, 6 byte
NORMAL, UNKNOWN, CONTROL, BYTE = 1, 2, 3, 6


@dataclass(frozen=True)
class TinyModel:
    """Everything a GGUF file of the model holds, as plain data."""

    seed: int
    tokens: list[str]
    scores: list[float]
    token_types: list[int]
    tensors: dict[str, np.ndarray]  # name -> float16 array, numpy (rows=out, cols=in) order


def vocabulary() -> tuple[list[str], list[float], list[int]]:
    """Special tokens, the 256 byte-fallback tokens, then printable ASCII pieces up to VOCAB."""
    tokens = list(SPECIAL) + [f"<0x{b:02X}>" for b in range(256)]
    types = [UNKNOWN, CONTROL, CONTROL] + [BYTE] * 256
    pieces = ["\u2581"] + [c for c in string.printable[:94]] + [f"\u2581{c}" for c in string.ascii_letters]
    pieces += [a + b for a in "etaoinshrdlu" for b in "etaoinshrdlu"]
    seen: set[str] = set()
    for piece in pieces:
        if len(tokens) == VOCAB:
            break
        if piece not in seen:
            seen.add(piece)
            tokens.append(piece)
            types.append(NORMAL)
    assert len(tokens) == VOCAB, len(tokens)
    scores = [0.0] * (len(SPECIAL) + 256) + [-float(i) for i in range(VOCAB - len(SPECIAL) - 256)]
    return tokens, scores, types


def tiny_llama(seed: int = 0) -> TinyModel:
    """The model's tensors and vocabulary for `seed` (pure; weights scaled by 1/sqrt(fan-in))."""
    rng = np.random.default_rng(seed)

    def dense(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols), dtype=np.float32) / np.sqrt(cols)).astype(np.float16)

    ones = np.ones(HIDDEN, dtype=np.float32)  # norms stay f32, as llama.cpp's converters write them
    tensors: dict[str, np.ndarray] = {"token_embd.weight": dense(VOCAB, HIDDEN)}
    for i in range(LAYERS):
        tensors |= {
            f"blk.{i}.attn_norm.weight": ones,
            f"blk.{i}.attn_q.weight": dense(HIDDEN, HIDDEN),
            f"blk.{i}.attn_k.weight": dense(HIDDEN, HIDDEN),
            f"blk.{i}.attn_v.weight": dense(HIDDEN, HIDDEN),
            f"blk.{i}.attn_output.weight": dense(HIDDEN, HIDDEN),
            f"blk.{i}.ffn_norm.weight": ones,
            f"blk.{i}.ffn_gate.weight": dense(FFN, HIDDEN),
            f"blk.{i}.ffn_up.weight": dense(FFN, HIDDEN),
            f"blk.{i}.ffn_down.weight": dense(HIDDEN, FFN),
        }
    output = dense(VOCAB, HIDDEN)
    output[: len(SPECIAL) + 256] = 0  # never the greedy choice: no early EOS, no partial UTF-8 bytes
    tensors |= {"output_norm.weight": ones, "output.weight": output}
    tokens, scores, types = vocabulary()
    return TinyModel(seed, tokens, scores, types, tensors)


def write_gguf(model: TinyModel, path: Path) -> str:
    """Write the model as GGUF (llama architecture); returns the file's sha256."""
    import gguf

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    writer = gguf.GGUFWriter(str(tmp), "llama")
    writer.add_name(f"tiny-llama-seed{model.seed}")
    writer.add_context_length(CONTEXT)
    writer.add_embedding_length(HIDDEN)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(HEADS)
    writer.add_rope_dimension_count(HIDDEN // HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(VOCAB)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(model.tokens)
    writer.add_token_scores(model.scores)
    writer.add_token_types(model.token_types)
    writer.add_bos_token_id(BOS)
    writer.add_eos_token_id(EOS)
    writer.add_unk_token_id(UNK)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    for name, array in model.tensors.items():
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.replace(path)
    return sha256_file(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m framework.assets.tiny_gguf", description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path, help="where to write the .gguf file")
    parser.add_argument("--seed", type=int, default=0, help="weights seed (same seed, same bytes)")
    args = parser.parse_args(argv)
    try:
        digest = write_gguf(tiny_llama(args.seed), args.path)
    except ImportError:
        print("error: the gguf package is needed: pip install gguf", file=sys.stderr)
        return 2
    print(f"{args.path}  {args.path.stat().st_size} bytes  sha256 {digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
