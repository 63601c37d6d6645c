"""The seeded tiny Llama GGUF: pure, reproducible to the byte, and shaped as documented."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from framework.assets import tiny_gguf


def test_same_seed_same_tensors_other_seed_other_weights():
    a, b, c = tiny_gguf.tiny_llama(0), tiny_gguf.tiny_llama(0), tiny_gguf.tiny_llama(1)
    assert a.tokens == b.tokens and len(a.tokens) == tiny_gguf.VOCAB == len(set(a.tokens))
    assert all(np.array_equal(a.tensors[k], b.tensors[k]) for k in a.tensors)
    assert not np.array_equal(a.tensors["token_embd.weight"], c.tensors["token_embd.weight"])
    assert a.tensors["blk.3.ffn_down.weight"].shape == (tiny_gguf.HIDDEN, tiny_gguf.FFN)
    # byte fallback: every byte has a token; specials and bytes are never the greedy choice
    assert a.tokens[3:259] == [f"<0x{i:02X}>" for i in range(256)]
    assert not a.tensors["output.weight"][:259].any() and a.tensors["output.weight"][259:].any()


def test_same_seed_same_bytes(tmp_path):
    pytest.importorskip("gguf", reason="the gguf package is not installed")
    first = tiny_gguf.write_gguf(tiny_gguf.tiny_llama(0), tmp_path / "a.gguf")
    second = tiny_gguf.write_gguf(tiny_gguf.tiny_llama(0), tmp_path / "b.gguf")
    assert first == second == hashlib.sha256((tmp_path / "a.gguf").read_bytes()).hexdigest()
    assert 5_000_000 < (tmp_path / "a.gguf").stat().st_size < 7_000_000
    assert tiny_gguf.write_gguf(tiny_gguf.tiny_llama(1), tmp_path / "c.gguf") != first
