"""Make a tiny random-weight Llama model folder that SGLang loads, locally (no download). Seeded.

usage: python tiny_model.py DIR

A `LlamaForCausalLM` of ~4.2M parameters (hidden 64, 2 layers, 4 heads, 2 KV heads) with seeded
random weights, and a byte-level BPE tokenizer trained with `tokenizers` on a few KB of text,
filled to 32000 ids with word tokens, with a chat template so the chat route works.
For the recording recipe only (record.sh).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

WORDS = ("the server answers each request with tokens from a tiny random model; the scheduler batches "
         "prefill and decode, and the client measures time to first token and time per output token. ")
VOCAB = 32000
CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def main(out: str) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<s>", "</s>", "<unk>"]
    trainer = trainers.BpeTrainer(vocab_size=2048, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([WORDS * 20, "0123456789 " * 50, "abcdefghijklmnopqrstuvwxyz " * 50], trainer)
    # the framework's synthetic prompts use ids up to 30000 (framework.core.workload.PROMPT_TOKEN_RANGE):
    # fill the vocabulary to VOCAB with plain word tokens, so every id decodes to non-empty text
    tok.add_tokens([f" w{i}" for i in range(VOCAB - tok.get_vocab_size())])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(d)
    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=tok.get_vocab_size(), max_position_embeddings=2048,
                         bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id, torch_dtype="float32")
    model = LlamaForCausalLM(config)
    model.save_pretrained(d)
    params = sum(p.numel() for p in model.parameters())
    print(json.dumps({"dir": str(d), "params": params, "vocab": tok.get_vocab_size()}))


if __name__ == "__main__":
    main(sys.argv[1])
