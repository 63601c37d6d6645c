"""SmolLM2's GGUF as a Hugging Face Llama directory, for the engines that load safetensors (vLLM, the GPU server).

llama.cpp reads the Q4_1 GGUF directly; vLLM's CPU build and the project's GPU server need
``config.json``, ``model.safetensors`` and a tokenizer. This module dequantizes the verified GGUF
(``framework.assets.smollm2``) with the ``gguf`` package and writes that directory:

* weights: every tensor dequantized to float32 (Q4_1 and Q8_0 blocks are ``d * q + m`` with f16 scales,
  so float32 holds them exactly), then stored as ``float32`` (CPU engines: vLLM's CPU build and the
  GPU server's CPU mode compute in f32, and no second rounding separates them from llama.cpp) or
  ``bfloat16`` (the GPU: the server's default dtype on CUDA; bf16 keeps 8 significant bits, so the
  converted model differs from llama.cpp's by that rounding, not by the conversion).
* attention: llama.cpp's converter permutes the rows of ``attn_q``/``attn_k`` (its RoPE pairs adjacent
  dimensions, Hugging Face's rotates halves); :func:`unpermute` is the inverse of its ``permute``.
* tied embeddings: the GGUF has no ``output.weight``; ``tie_word_embeddings: true`` says the LM head is
  the embedding, as in the original checkpoint.
* config: shapes, ``rope_theta``, ``rms_norm_eps`` and the context from the GGUF's metadata.
* tokenizer: ``transformers`` builds it from the GGUF's tokenizer metadata (``gguf_file=``) and saves it.

The directory is cached under ``$FRAMEWORK_CACHE_DIR`` (else ``~/.cache/framework``) as
``smollm2-hf/<gguf sha256[:16]>-<dtype>``, written into a temporary directory and renamed into place,
so a reader never sees half a model. The same GGUF and dtype give the same bytes (tensors in a fixed
order, no timestamps); ``framework-conversion.json`` in the directory names the source file, its sha256,
the dtype and every output file's sha256, and ``digest`` (the sha256 of those ``name sha256`` lines) is
the directory's one-line identity, which the record's environment reports where an engine loads it.

It needs ``gguf``, ``torch``, ``safetensors`` and ``transformers`` (the GPU machine and the vLLM venv have
them; ``pip install gguf``):

    python -m framework.assets.smollm2_hf --dtype float32     # prints the directory and its digest
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Literal

import numpy as np

from framework.assets import smollm2
from framework.core.hashing import sha256_file
from framework.errors import SpecError

Dtype = Literal["float32", "bfloat16"]
DTYPES: tuple[str, ...] = ("float32", "bfloat16")
MANIFEST = "framework-conversion.json"
CONVERTER = "framework.assets.smollm2_hf/1"  # bump when the output bytes would change
WEIGHTS = "model.safetensors"


def cache_root() -> Path:
    base = os.environ.get("FRAMEWORK_CACHE_DIR") or str(Path.home() / ".cache" / "framework")
    return Path(base) / "smollm2-hf"


def cache_dir(gguf_sha256: str, dtype: str) -> Path:
    """Where the conversion of the GGUF with this digest to ``dtype`` lives."""
    return cache_root() / f"{gguf_sha256[:16]}-{dtype}"


def unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's ``permute`` of Q/K rows (``convert_hf_to_gguf.py``): per head, its rows were reordered
    from [first half, second half] to interleaved pairs; this puts them back
    (``[heads, 2, d/2] <- [heads, d/2, 2]``)."""
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _field(reader: Any, key: str) -> Any:
    """A scalar or string metadata value (``ReaderField.contents()`` where the gguf package has it)."""
    f = reader.fields[key]
    if hasattr(f, "contents"):
        return f.contents()
    value = f.parts[f.data[0]]  # older gguf: the raw parts (a string is its bytes)
    return bytes(value).decode("utf-8") if value.dtype == np.uint8 else value.tolist()[0]


def hf_config(reader: Any) -> dict[str, Any]:
    """A ``LlamaForCausalLM`` config.json from the GGUF's ``llama.*`` metadata."""
    a = "llama."
    heads = int(_field(reader, a + "attention.head_count"))
    hidden = int(_field(reader, a + "embedding_length"))
    eps = float(f"{float(_field(reader, a + 'attention.layer_norm_rms_epsilon')):.6g}")  # f32 1e-5 -> 1e-05
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": hidden, "intermediate_size": int(_field(reader, a + "feed_forward_length")),
        "num_hidden_layers": int(_field(reader, a + "block_count")), "num_attention_heads": heads,
        "num_key_value_heads": int(_field(reader, a + "attention.head_count_kv")),
        "head_dim": int(_field(reader, a + "rope.dimension_count")) if a + "rope.dimension_count" in reader.fields
        else hidden // heads,
        "vocab_size": int(_field(reader, a + "vocab_size")),
        "max_position_embeddings": int(_field(reader, a + "context_length")),
        "rms_norm_eps": eps, "rope_theta": float(_field(reader, a + "rope.freq_base")), "rope_scaling": None,
        "hidden_act": "silu", "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": True,
        "bos_token_id": int(_field(reader, "tokenizer.ggml.bos_token_id")),
        "eos_token_id": int(_field(reader, "tokenizer.ggml.eos_token_id")),
        "pad_token_id": int(_field(reader, "tokenizer.ggml.padding_token_id")),
        "initializer_range": 0.02, "pretraining_tp": 1, "use_cache": True,
    }


_NAMES = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
          "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
          "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"}


def hf_name(gguf_name: str) -> str:
    """``blk.3.attn_q.weight`` -> ``model.layers.3.self_attn.q_proj.weight`` (and the three global tensors)."""
    glob = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
            "output.weight": "lm_head.weight"}
    if gguf_name in glob:
        return glob[gguf_name]
    blk, i, part, kind = gguf_name.split(".")
    if blk != "blk" or part not in _NAMES:
        raise ValueError(f"unexpected GGUF tensor {gguf_name!r}")
    return f"model.layers.{int(i)}.{_NAMES[part]}.{kind}"


def hf_tensors(reader: Any, config: dict[str, Any]) -> dict[str, np.ndarray]:
    """Every GGUF tensor dequantized to float32 under its Hugging Face name, Q/K rows unpermuted."""
    from gguf.quants import dequantize

    out: dict[str, np.ndarray] = {}
    for t in reader.tensors:
        w = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32)
        w = w.reshape([int(x) for x in reversed(t.shape)]) if w.ndim != len(t.shape) else w
        part = t.name.split(".")[2] if t.name.startswith("blk.") else ""
        if part == "attn_q":
            w = unpermute(w, config["num_attention_heads"])
        elif part == "attn_k":
            w = unpermute(w, config["num_key_value_heads"])
        out[hf_name(t.name)] = np.ascontiguousarray(w)
    out.pop("lm_head.weight", None)  # tied: the embedding is the head
    return out


def directory_digest(files: dict[str, str]) -> str:
    """The sha256 of the sorted ``name sha256`` lines: one identity for the whole directory."""
    return hashlib.sha256("".join(f"{n} {files[n]}\n" for n in sorted(files)).encode()).hexdigest()


def _write(gguf_path: Path, dtype: str, out: Path) -> None:
    import torch
    from gguf import GGUFReader
    from safetensors.torch import save_file
    from transformers import AutoTokenizer

    reader = GGUFReader(str(gguf_path))
    config = hf_config(reader)
    config["torch_dtype"] = dtype
    tensors = {k: torch.from_numpy(v.copy()).to(getattr(torch, dtype)).contiguous()
               for k, v in sorted(hf_tensors(reader, config).items())}
    save_file(tensors, str(out / WEIGHTS), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    gen = {"bos_token_id": config["bos_token_id"], "eos_token_id": config["eos_token_id"],
           "pad_token_id": config["pad_token_id"], "do_sample": False}
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tok = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    tok.save_pretrained(str(out))


def convert(dtype: str = "float32", *, gguf: smollm2.ModelFile | None = None, dest: Path | None = None) -> Path:
    """The cached HF directory for the verified GGUF at ``dtype``; converted (atomically) when absent."""
    if dtype not in DTYPES:
        raise SpecError("smollm2_hf", "dtype", f"{dtype!r}; allowed: {', '.join(DTYPES)}")
    src = gguf or smollm2.locate()
    target = dest or cache_dir(src.sha256, dtype)
    if (target / MANIFEST).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        _write(src.path, dtype, tmp)
        files = {p.name: sha256_file(p) for p in sorted(tmp.iterdir()) if p.is_file()}
        manifest = {"converter": CONVERTER, "source": {"file": src.path.name, "bytes": src.bytes,
                                                       "sha256": src.sha256},
                    "dtype": dtype, "files": files, "digest": directory_digest(files)}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        for p in tmp.iterdir():  # mkdtemp's 0700 and safetensors' 0600: readable like any cache entry
            p.chmod(0o644)
        tmp.chmod(0o755)
        try:
            tmp.rename(target)
        except OSError:  # another process renamed its conversion first: the same bytes, keep theirs
            if not (target / MANIFEST).is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def manifest(directory: str | Path) -> dict[str, Any] | None:
    """The conversion manifest of a directory this module wrote; None for any other directory."""
    path = Path(directory) / MANIFEST
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("converter") else None


def verify(directory: str | Path) -> dict[str, Any]:
    """Re-hash a converted directory against its manifest; the manifest, or a SpecError naming the file."""
    m = manifest(directory)
    if m is None:
        raise SpecError(directory, MANIFEST, "missing or unreadable: not a conversion of framework.assets.smollm2_hf")
    for name, digest in m["files"].items():
        got = sha256_file(Path(directory) / name) if (Path(directory) / name).is_file() else "absent"
        if got != digest:
            raise SpecError(directory, name,
                            f"sha256 {got}, manifest says {digest}; delete the directory and convert again")
    return m


def main(argv: list[str] | None = None) -> int:
    """Convert (or find the cached conversion) and print ``DIR digest``; exit 2 with one line on bad input."""
    p = argparse.ArgumentParser(prog="python -m framework.assets.smollm2_hf", description=__doc__.splitlines()[0])
    p.add_argument("--dtype", choices=DTYPES, default="float32")
    p.add_argument("--out", type=Path, help="write here instead of the cache (must not exist)")
    p.add_argument("--verify", action="store_true", help="re-hash the directory against its manifest")
    a = p.parse_args(argv)
    try:
        if a.out is not None and a.out.exists():
            raise SpecError("--out", "path", f"{a.out} exists; give a new directory")
        out = convert(a.dtype, dest=a.out)
        m = verify(out) if a.verify else manifest(out)
    except SpecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    assert m is not None
    print(out, m["digest"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
