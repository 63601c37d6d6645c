"""The seeded tiny Hugging Face model (framework.assets.tiny_hf), made in the vLLM venv.

Marker `vllm`: the generator needs torch, transformers and tokenizers, which the vLLM venv that
`bash .ci/vllm.sh` builds has and the project's venv need not; without that venv it is skipped
with the reason. `python -m pytest -q -m vllm` runs it with the rest of the vLLM tier.
"""

from __future__ import annotations

import json
import os
import subprocess

from cli_helpers import ROOT
from vllm_venv import PYTHON, TIER, generate_tiny_hf

pytestmark = TIER


def test_the_tiny_hf_model_is_seeded_and_its_words_are_single_tokens(tmp_path, tiny_hf):
    """Same seed, same bytes in every file; another seed, other weights; the client's words tokenize one each."""
    path, digests = tiny_hf
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= set(digests)
    assert generate_tiny_hf(tmp_path / "again") == digests
    other = generate_tiny_hf(tmp_path / "other", seed=1)
    assert other["model.safetensors"] != digests["model.safetensors"]
    probe = ("import json, sys; from transformers import AutoTokenizer; from framework.core.workload import TEXT_WORDS;"
             "t = AutoTokenizer.from_pretrained(sys.argv[1]); text = ' '.join(TEXT_WORDS);"
             "print(json.dumps({'ids': len(t(text)['input_ids']), 'words': len(TEXT_WORDS), 'vocab': len(t),"
             "'config_vocab': json.load(open(sys.argv[1] + '/config.json'))['vocab_size'],"
             "'roundtrip': t.decode(t(text)['input_ids']) == text}))")
    out = subprocess.run([str(PYTHON), "-c", probe, str(path)], env={**os.environ, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    facts = json.loads(out.stdout.splitlines()[-1])
    assert facts["ids"] == facts["words"] and facts["roundtrip"], facts
    assert facts["vocab"] == facts["config_vocab"], facts
