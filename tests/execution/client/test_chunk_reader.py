"""The hot path: raw reads split into events on bytes, plain events counted from their bytes, each chunk
stamped as its data arrived. What it yields must be what decoding every event yields (the client's previous
path, kept here as the reference), however the bytes were cut into reads."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from framework.execution.client.stream import ChunkReader, MalformedEvent, StreamParser, sse_data


def reference(endpoint: str, reads: list[bytes]) -> tuple[list[int], StreamParser]:
    """Every event decoded (the client's path before the byte-level one): tokens per token-carrying read."""
    parser, buffer, tokens = StreamParser(endpoint), b"", []
    for piece in reads:
        buffer += piece
        got = events = 0
        while b"\n\n" in buffer:
            event, buffer = buffer.split(b"\n\n", 1)
            data = sse_data(event)
            if not data or data == b"[DONE]":
                continue
            got += parser.event(data)
            events += 1
        if got or (events and endpoint == "generate"):
            tokens.append(got)
    return tokens, parser


def openai_stream(endpoint: str, steps: list[int], compact: bool) -> bytes:
    dumps = (lambda o: json.dumps(o, separators=(",", ":"))) if compact else json.dumps
    out, seen = [b": ping\n\n"], 0
    for i, k in enumerate(steps):
        seen += k
        finish = "length" if i == len(steps) - 1 else None
        choice = ({"index": 0, "text": " t" * k, "finish_reason": finish} if endpoint == "completions" else
                  {"index": 0, "delta": {"content": " t" * k}, "finish_reason": finish})
        out.append(b"data: " + dumps({"id": "x", "choices": [choice],
                                      "usage": {"prompt_tokens": 3, "completion_tokens": seen}}).encode() + b"\n\n")
    out.append(b"data: " + dumps({"id": "x", "choices": [], "usage": {"prompt_tokens": 3,
                                                                      "completion_tokens": seen}}).encode() + b"\n\n")
    return b"".join([*out, b"data: [DONE]\n\n"])


def generate_stream(steps: list[int], compact: bool) -> bytes:
    dumps = (lambda o: json.dumps(o, separators=(",", ":"))) if compact else json.dumps
    out, seen = [], 0
    for i, k in enumerate(steps):
        seen += k
        meta = {"id": "r", "prompt_tokens": 3, "completion_tokens": seen,
                "finish_reason": {"type": "length"} if i == len(steps) - 1 else None}
        out.append(b"data: " + dumps({"text": " t" * seen, "meta_info": meta}).encode() + b"\n\n")
    return b"".join([*out, b"data: [DONE]\n\n"])


@settings(max_examples=150, deadline=None, derandomize=True)
@given(endpoint=st.sampled_from(["completions", "chat", "generate"]),
       steps=st.lists(st.integers(1, 4), min_size=1, max_size=40), compact=st.booleans(),
       cuts=st.lists(st.integers(0, 10_000), max_size=30))
def test_the_byte_path_counts_what_decoding_every_event_counts(endpoint, steps, compact, cuts):
    data = generate_stream(steps, compact) if endpoint == "generate" else openai_stream(endpoint, steps, compact)
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    reads = [data[a:b] for a, b in zip(points, points[1:], strict=False) if b > a]
    reader = ChunkReader(StreamParser(endpoint))
    for i, piece in enumerate(reads):
        reader.read(float(i), piece)
    tokens, parser = reference(endpoint, reads)
    assert reader.tokens == tokens and reader.total == sum(steps)
    assert reader.parser.finished and parser.finished and reader.parser.seen == parser.seen
    assert reader.times == sorted(reader.times) and len(reader.events) == len(reader.tokens)
    if endpoint != "generate":
        assert reader.parser.usage["completion_tokens"] == sum(steps)  # the usage-only chunk is decoded


def test_errors_and_malformed_events_are_decoded_not_counted():
    err = ChunkReader(StreamParser("generate"))
    err.read(0.0, generate_stream([1], True).replace(b"[DONE]", b'{"error": {"message": "too long"}}'))
    assert err.parser.error == "too long"
    bad = ChunkReader(StreamParser("generate"))
    bad.read(0.0, generate_stream([1, 1], True))  # the stream is cumulative now: the next event takes the fast path
    with pytest.raises(MalformedEvent, match="after 2 tokens"):
        bad.read(1.0, b'data: {"meta_info": {"finish_reason": null, "completion_tokens": }\n\n')
