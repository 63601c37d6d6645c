"""The workload module: plans are pure, seeded and shaped as the DSL says."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from framework.core.workload import (
    Normal,
    Uniform,
    Workload,
    arrival_times,
    draw_lengths,
    make_plan,
    parse_dataset,
    schedule_hash,
    total_requests,
)


def test_closed_loop_warms_up_a_full_round_and_keeps_the_loop_full():
    plan = make_plan(Workload(concurrency=16), requests_n=3, warmup=1, seed=1)
    phases = [r.phase for r in plan.requests]
    assert phases.count("warmup") == 16  # the first round is a burst: never measured
    assert phases.count("measured") == 16  # at least one full round, not min(concurrency, requests)
    assert phases.count("cooldown") == 15  # keeps 16 in flight until the last measured one ends
    assert plan.concurrency == 16 and plan.mode == "closed"


def test_single_stream_is_unchanged():
    assert total_requests(Workload(), 3, 1) == (1, 3)
    assert total_requests(Workload(), 1, 0) == (0, 1)
    plan = make_plan(Workload(), requests_n=2, warmup=1, seed=1)
    assert [r.phase for r in plan.requests] == ["warmup", "measured", "measured"]


@settings(max_examples=25)
@given(seed=st.integers(0, 2**31), rate=st.floats(0.5, 200), burst=st.sampled_from([0.5, 1.0, 4.0]))
def test_schedule_is_seeded_and_nondecreasing(seed, rate, burst):
    w = Workload(request_rate=rate, burstiness=burst)
    a = make_plan(w, requests_n=20, warmup=2, seed=seed)
    b = make_plan(w, requests_n=20, warmup=2, seed=seed)
    times = [r.send_at_s for r in a.requests]
    assert times == [r.send_at_s for r in b.requests] and times[0] == 0.0
    assert all(x <= y for x, y in zip(times, times[1:], strict=False))
    assert a.resolved["schedule_sha256"] == schedule_hash(times)


def test_gamma_arrivals_have_the_mean_rate_and_the_burstiness():
    rng = np.random.default_rng(0)
    for burst in (0.25, 1.0, 4.0):
        gaps = np.diff(arrival_times(40001, 8.0, burst, rng))
        assert gaps.mean() == pytest.approx(1 / 8.0, rel=0.03)
        assert (gaps.std() / gaps.mean()) ** 2 == pytest.approx(1 / burst, rel=0.08)  # CV^2 of a gamma = 1/shape


def test_duration_runs_every_arrival_within_the_window():
    plan = make_plan(Workload(request_rate=20, duration_s=5), requests_n=3, warmup=0, seed=4)
    measured = [r.send_at_s for r in plan.requests if r.phase == "measured"]
    assert measured[-1] - measured[0] <= 5 and 60 < len(measured) < 140


def test_length_distributions():
    rng = np.random.default_rng(1)
    u = draw_lengths(Uniform(dist="uniform", low=10, high=20), 2000, rng)
    assert min(u) == 10 and max(u) == 20
    n = draw_lengths(Normal(dist="normal", mean=50, sd=40, min=8), 2000, rng)
    assert min(n) == 8 and 40 < np.mean(n) < 60
    assert draw_lengths(7, 3, rng) == [7, 7, 7]


def test_text_prompts_and_shared_prefixes():
    w = Workload(prompt="text", prompt_tokens=20, shared_prefix={"groups": 2, "prefix_tokens": 30})
    plan = make_plan(w, requests_n=4, warmup=0, seed=2)
    prompts = [r.prompt for r in plan.requests]
    assert all(isinstance(p, str) for p in prompts)
    assert prompts[0].split()[:30] == prompts[2].split()[:30] != prompts[1].split()[:30]
    assert plan.requests[0].prompt_tokens == 50
    ids = make_plan(Workload(prompt_tokens=5, shared_prefix={"groups": 1, "prefix_tokens": 3}), requests_n=2,
                    warmup=0, seed=2).requests
    assert ids[0].prompt[:3] == ids[1].prompt[:3] and len(ids[0].prompt) == 8


def test_datasets_sharegpt_and_jsonl():
    share = [{"conversations": [{"from": "human", "value": "what is up"}, {"from": "gpt", "value": "the sky " * 10}]},
             {"conversations": [{"from": "gpt", "value": "no human turn"}]},
             {"conversations": [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi there"}]}]
    rows = parse_dataset(json.dumps(share))
    assert [r.prompt for r in rows] == ["what is up", "hello"] and rows[0].output_len == 20
    assert parse_dataset("\n".join(json.dumps(x) for x in share), "sharegpt")[1].prompt == "hello"
    jl = parse_dataset('{"prompt": "a b", "output_len": 9}\n{"prompt": "c"}\n')
    assert [(r.prompt, r.output_len) for r in jl] == [("a b", 9), ("c", None)]
    with pytest.raises(ValueError, match="line 2"):
        parse_dataset('{"prompt": "a"}\n{oops\n')
    with pytest.raises(ValueError, match="output_len"):
        parse_dataset('{"prompt": "a", "output_len": -1}')


def test_dataset_sampling_is_seeded_and_recorded():
    rows = parse_dataset("\n".join(json.dumps({"prompt": f"p{i}", "output_len": 10 + i}) for i in range(50)))
    w = Workload(dataset={"path": "d.jsonl"})
    a = make_plan(w, requests_n=8, warmup=1, seed=9, dataset=rows, dataset_info={"path": "d.jsonl", "sha256": "x"})
    b = make_plan(w, requests_n=8, warmup=1, seed=9, dataset=rows)
    assert [r.prompt for r in a.requests] == [r.prompt for r in b.requests]
    assert all(r.output_tokens == rows[r.dataset_row].output_len for r in a.requests)
    assert a.resolved["dataset"]["sha256"] == "x" and a.resolved["dataset"]["rows_used"]


@pytest.mark.parametrize("fields,fragment", [
    ({"max_concurrency": 4}, "open loop only"),
    ({"request_rate": 2, "concurrency": 4}, "max_concurrency"),
    ({"endpoint": "chat"}, "prompt: text"),
    ({"prompt_tokens": {"dist": "uniform", "low": 9, "high": 3}}, "high"),
    ({"prompt_tokens": {"dist": "zipf"}}, "dist"),
    ({"request_rate": 0}, "greater than 0"),
])
def test_bad_workloads_say_what_is_allowed(fields, fragment):
    with pytest.raises(ValidationError) as info:
        Workload(**fields)
    assert fragment in str(info.value)
