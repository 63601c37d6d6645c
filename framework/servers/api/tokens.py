"""The tokenizer stand-in every server we ship shares: pseudo-word tokens, a stable seed per prompt.

Pure functions; the sim's engine and the GPU server both detokenize through them, so the same ids
give the same text on either.
"""

from __future__ import annotations

import math
import zlib
from typing import Sequence

WORDS = ("lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit", "sed", "do",
         "eiusmod", "tempor", "incididunt", "ut", "labore", "et", "dolore", "magna", "aliqua", "enim",
         "ad", "minim", "veniam", "quis", "nostrud", "exercitation", "ullamco", "laboris", "nisi",
         "aliquip", "ex", "ea")
TOKEN_ID_BASE = 1000


def prompt_seed(prompt: str | Sequence[int]) -> int:
    """A stable seed per prompt, so a greedy request repeats its output like a real server."""
    data = prompt.encode() if isinstance(prompt, str) else ",".join(map(str, prompt)).encode()
    return zlib.crc32(data)


def token_id(seed: int, index: int) -> int:
    return TOKEN_ID_BASE + (seed + index * 7 + index // len(WORDS)) % len(WORDS)


def token_text(tid: int) -> str:
    return " " + WORDS[(tid - TOKEN_ID_BASE) % len(WORDS)]


def count_text_tokens(text: str) -> int:
    """A tokenizer stand-in: ~1 token per word piece of up to 4 characters, at least 1."""
    return max(1, sum(max(1, math.ceil(len(w) / 4)) for w in text.split()))


