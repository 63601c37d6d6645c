"""The client's derived figures from raw chunk times (pure part)."""

import pytest

from framework.execution.client import prompt_ids, summarize_stream


def test_decode_rate_counts_tokens_after_the_first_chunk():
    times = [0.05, 0.06, 0.07, 0.08]  # first token at 50 ms, then one per 10 ms
    out = summarize_stream(times, [1, 1, 1, 1], e2e=0.081, time_scale=1.0, meta={})
    assert out["ttft_s"] == pytest.approx(0.05)
    assert out["decode_tok_s"] == pytest.approx(3 / 0.03)
    assert out["tpot_s"] == pytest.approx(0.01)
    assert out["completion_tokens"] == 4


def test_multi_token_chunks_and_accept_length():
    out = summarize_stream([0.1, 0.2, 0.3], [1, 3, 2], e2e=0.3, time_scale=1.0,
                           meta={"spec_verify_ct": 3})
    assert out["decode_tok_s"] == pytest.approx(5 / 0.2)
    assert out["accept_length"] == pytest.approx(2.0)


def test_time_scale_converts_wall_to_model_seconds():
    fast = summarize_stream([0.005, 0.015], [1, 1], e2e=0.02, time_scale=10.0, meta={})
    assert fast["ttft_s"] == pytest.approx(0.05)
    assert fast["decode_tok_s"] == pytest.approx(1 / 0.1)


def test_no_tokens_gives_no_rates():
    out = summarize_stream([], [], e2e=1.0, time_scale=1.0, meta={})
    assert out["decode_tok_s"] is None and out["ttft_s"] is None


def test_prompts_are_reproducible_and_distinct():
    assert prompt_ids(1, 0, 16) == prompt_ids(1, 0, 16)
    assert prompt_ids(1, 0, 16) != prompt_ids(1, 1, 16)
    assert len(prompt_ids(1, 0, 128)) == 128
