"""Decode measured from each chunk's token count, or the request says why it could not be.

An OpenAI server asked for per-chunk usage (`continuous_usage_stats`) says how many tokens each chunk
carries; a merged chunk then counts every token it holds, and a request whose tokens all came in one
chunk keeps its TTFT and end-to-end time but has no decode figure, with the reason on its row.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from framework.core.metrics import decode
from framework.core.workload import Workload
from framework.execution.client.request import request_body
from framework.execution.client.stream import StreamParser, summarize_stream


def _chunk(text: str, cumulative: int | None = None, finish: str | None = None) -> bytes:
    usage = None if cumulative is None else {"prompt_tokens": 3, "completion_tokens": cumulative}
    return json.dumps({"choices": [{"index": 0, "text": text, "finish_reason": finish}], "usage": usage}).encode()


def test_openai_requests_ask_for_usage_on_every_chunk():
    body = request_body("completions", [1, 2, 3], 8, Workload(prompt_tokens=3, output_tokens=8), "m")
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}


def test_per_chunk_usage_counts_every_token_a_merged_chunk_carries():
    p = StreamParser("completions")
    chunks = [_chunk("a", 1), _chunk("bcde", 5), _chunk("", 6), _chunk("f", 7, "length")]
    counts = [p.event(c) for c in chunks]
    assert counts == [1, 4, 1, 1]  # a token with no text yet (a partial character) still arrived then
    assert p.event(json.dumps({"choices": [], "usage": {"completion_tokens": 7}}).encode()) == 0 and p.finished


def test_without_per_chunk_usage_each_content_chunk_is_one_token():
    p = StreamParser("chat")
    role = json.dumps({"choices": [{"delta": {"role": "assistant", "content": ""}}]}).encode()
    tok = json.dumps({"choices": [{"delta": {"content": "x"}}]}).encode()
    assert [p.event(role), p.event(tok), p.event(tok)] == [0, 1, 1]


def test_decode_is_the_tokens_after_the_first_chunk_over_first_to_last():
    out = summarize_stream([0.1, 0.2, 0.4], [3, 2, 2], e2e=0.4, time_scale=2.0, meta={})
    assert out["decode_tokens"] == 4 and out["decode_s"] == pytest.approx(0.6)
    assert out["decode_tok_s"] == pytest.approx(4 / 0.6) and out["tpot_s"] == pytest.approx(0.6 / 4)
    assert out["decode_unmeasured"] is None


@pytest.mark.parametrize("times,tokens,completion,why", [
    ([0.3], [8], 8, "one_chunk"),            # the whole answer in one read: merged
    ([0.3], [1], 1, "one_token"),            # nothing to decode
    ([], [], 0, "no_tokens"),
    ([0.3, 0.3], [1, 4], 5, "no_time"),      # later chunks at the same instant: no per-token timing
])
def test_an_unmeasurable_decode_says_why_and_keeps_the_other_figures(times, tokens, completion, why):
    out = summarize_stream(times, tokens, e2e=0.5, time_scale=1.0, meta={}, completion=completion)
    assert out["decode_tok_s"] is None and out["tpot_s"] is None and out["decode_tokens"] is None
    assert out["decode_unmeasured"] == why
    assert out["e2e_s"] == 0.5 and (out["ttft_s"] == 0.3) == bool(times)


@settings(max_examples=200, derandomize=True, database=None)
@given(st.lists(st.tuples(st.floats(0.001, 10), st.integers(0, 5)), max_size=12))
def test_decode_counts_exactly_the_tokens_after_the_first_carrying_chunk(chunks):
    chunks.sort()
    times, tokens = [t for t, _ in chunks], [n for _, n in chunks]
    n, span, why = decode(times, tokens, sum(tokens))
    carrying = [(t, k) for t, k in chunks if k]
    if n is None:
        assert why is not None and span is None
    else:
        assert why is None and n == sum(tokens) - carrying[0][1] and span == carrying[-1][0] - carrying[0][0] > 0
