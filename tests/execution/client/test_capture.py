"""What a request generated, kept from its stream's events: ids where the API sends them, else text; bounded."""

from __future__ import annotations

import json

from framework.execution.client.capture import PIECE_CHARS, OutputCapture, prompt_digest
from framework.execution.client.stream import ChunkReader, StreamParser


def sse(*payloads: dict) -> bytes:
    return b"".join(b"data: " + json.dumps(p).encode() + b"\n\n" for p in payloads) + b"data: [DONE]\n\n"


def completion_chunk(text: str, n: int, finish: str | None = None) -> dict:
    return {"choices": [{"index": 0, "text": text, "finish_reason": finish}],
            "usage": {"completion_tokens": n, "prompt_tokens": 3}}


def test_a_completions_stream_keeps_its_text_pieces_and_still_counts_every_token():
    cap = OutputCapture("a prompt", 8)
    reader = ChunkReader(StreamParser("completions", cap))
    reader.read(0.1, sse(completion_chunk(" The", 1), completion_chunk(" cat", 2), completion_chunk(".", 3, "stop")))
    assert reader.total == 3 and reader.parser.finished
    assert cap.record() == {"prompt_sha256": prompt_digest("a prompt"), "text": " The cat.", "tokens": 3,
                            "truncated": False}


def test_vllm_token_ids_are_kept_as_ids():
    cap = OutputCapture([1, 2, 3], 8)
    for ids in ([11], [12, 13]):
        cap.take("completions", {"choices": [{"index": 0, "text": "x", "token_ids": ids}]})
    assert cap.record()["ids"] == [11, 12, 13] and cap.record()["tokens"] == 3


def test_sglang_generate_cumulative_and_incremental_output_ids():
    cum = OutputCapture([1], 8)
    for ids in ([5], [5, 5], [5, 5, 7]):
        cum.take("generate", {"text": "", "output_ids": ids, "meta_info": {"completion_tokens": len(ids)}})
    assert cum.record()["ids"] == [5, 5, 7]
    inc = OutputCapture([1], 8)  # --stream-output: each event only its new ids (a repeated token is not lost)
    for n, ids in enumerate(([5], [5], [7]), start=1):
        inc.take("generate", {"text": "", "output_ids": ids, "meta_info": {"completion_tokens": n}})
    assert inc.record()["ids"] == [5, 5, 7]


def test_the_capture_is_bounded_by_the_requests_output_tokens():
    cap = OutputCapture("p", 2)
    for t in ("a", "b", "c"):
        cap.take("completions", {"choices": [{"index": 0, "text": t}]})
    assert cap.record()["text"] == "ab" and cap.record()["truncated"] is True
    long = OutputCapture("p", 4)
    long.take("chat", {"choices": [{"index": 0, "delta": {"content": "y" * 1000}}]})
    assert len(long.record()["text"]) == PIECE_CHARS and long.record()["truncated"] is True
    ids = OutputCapture("p", 2)
    ids.take("generate", {"output_ids": [1, 2, 3], "meta_info": {"completion_tokens": 3}})
    assert ids.record()["ids"] == [1, 2] and ids.record()["truncated"] is True


def test_the_prompt_digest_tells_ids_from_text():
    assert prompt_digest([1, 2]) != prompt_digest("[1,2]") and prompt_digest("a") == prompt_digest("a")
