"""The n-gram drafter (SGLang's ``--speculative-algorithm NGRAM``; prompt lookup decoding): drafts from the text so far.

A model-free draft: the request's last ``n`` tokens (its prompt and its output so far) are looked up earlier in
the same sequence, and the tokens that followed the most recent earlier occurrence are proposed as the next
``k - 1``; the longest ``n`` (``max_n`` down to ``min_n``) with a match wins. The target model then scores the
last accepted token and the drafts in one verify pass, and the engine keeps the longest prefix of drafts equal
to the target's own greedy tokens plus the target's next token, so greedy outputs are the target's by
construction; only the number of forward passes changes. It pays where the output repeats the prompt (copy,
extraction, editing) and costs a wider verify pass where nothing matches.

Pure functions on token ids (no torch): the engine calls :func:`propose` per request per step.
"""

from __future__ import annotations

import numpy as np

MAX_N, MIN_N = 3, 1  # SGLang's --speculative-ngram-max-match-window-size / -min-... defaults are of this order


def propose(history: list[int], k: int, max_n: int = MAX_N, min_n: int = MIN_N) -> list[int]:
    """Up to ``k`` tokens that followed the most recent earlier occurrence of the history's last ``n`` tokens."""
    if k <= 0 or len(history) < min_n + 1:
        return []
    seq = np.asarray(history, dtype=np.int64)
    for n in range(min(max_n, len(seq) - 1), min_n - 1, -1):
        suffix = seq[-n:]
        windows = np.lib.stride_tricks.sliding_window_view(seq[:-1], n)  # every n-gram that has a successor
        hits = np.flatnonzero((windows == suffix).all(axis=1))
        if hits.size:
            start = int(hits[-1]) + n
            return [int(t) for t in seq[start:start + k]]
    return []


def accept(drafts: list[int], verified: list[int]) -> list[int]:
    """Greedy verification: the drafts the target agrees with, in order, then the target's own next token.

    ``verified[j]`` is the target's greedy token after the last accepted token and ``drafts[:j]``;
    ``len(verified) == len(drafts) + 1``."""
    n = 0
    while n < len(drafts) and drafts[n] == verified[n]:
        n += 1
    return drafts[:n] + [verified[n]]
