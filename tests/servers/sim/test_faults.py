"""The fault plan: flags and plan files parse into one validated plan (the faults themselves are
exercised end to end in tests/e2e/test_fault_injection.py)."""

from __future__ import annotations

import json

import pytest

from framework.servers.sim.args import parse_server_args
from framework.servers.sim.faults import FaultPlan


def test_no_fault_flag_means_no_plan():
    assert parse_server_args(["--model-path", "m"]).sim_faults is None


def test_flags_and_a_plan_file_combine_with_flags_winning(tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text("http_500: true\ncut_stream: 2\nrate: 0.5\n")
    got = parse_server_args(["--model-path", "m", "--sim-fault-plan", str(plan), "--sim-fault-cut-stream", "5",
                             "--sim-fault-crash-at-start"]).sim_faults
    assert got == FaultPlan(http_500=True, cut_stream=5, rate=0.5, crash_at_start=1)
    assert got.active and got.describe() == "crash_at_start=1, cut_stream=5, http_500=True, rate=0.5"
    assert not FaultPlan(rate=0.3).active


@pytest.mark.parametrize("argv,fragment", [
    (["--sim-fault-rate", "1.5"], "sim fault rate"),
    (["--sim-fault-cut-stream", "-1"], "sim fault cut_stream"),
    (["--sim-fault-plan", "/no/such/plan.yaml"], "--sim-fault-plan"),
])
def test_bad_fault_settings_exit_2_with_the_setting(capsys, argv, fragment):
    with pytest.raises(SystemExit) as exc:
        parse_server_args(["--model-path", "m", *argv])
    assert exc.value.code == 2 and fragment in capsys.readouterr().err


def test_unknown_setting_in_a_plan_file_is_refused(tmp_path, capsys):
    plan = tmp_path / "plan.yaml"
    plan.write_text("crash_sometimes: true\n")
    with pytest.raises(SystemExit):
        parse_server_args(["--model-path", "m", "--sim-fault-plan", str(plan)])
    assert "crash_sometimes" in capsys.readouterr().err


def _events(data: bytes) -> list:
    out = []
    for e in data.split(b"\n\n"):
        text = e.strip().removeprefix(b"data:").strip()
        if text:
            out.append(text.decode() if text == b"[DONE]" else json.loads(text))
    return out


def test_merge_chunks_sends_one_openai_chunk_with_every_token_and_the_usage_after_it():
    from framework.servers.sim.faults import merge_events

    chunks = [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}], "usage": None}]
    chunks += [{"choices": [{"index": 0, "delta": {"content": c}, "finish_reason": "length" if i == 2 else None}],
                "usage": {"completion_tokens": i + 1}, "sim_model_t": 0.1 * (i + 1)} for i, c in enumerate("abc")]
    chunks.append({"choices": [], "usage": {"completion_tokens": 3}})
    data = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
    merged, usage, done = _events(merge_events(data))
    assert merged["choices"][0]["delta"] == {"role": "assistant", "content": "abc"}
    assert merged["choices"][0]["finish_reason"] == "length" and merged["usage"] == {"completion_tokens": 3}
    assert merged["sim_model_t"] == pytest.approx(0.3) and usage["choices"] == [] and done == "[DONE]"


def test_merge_chunks_keeps_the_last_generate_event_and_joins_incremental_ids():
    from framework.servers.sim.faults import merge_events

    cumulative = [{"text": "ab"[: i + 1], "output_ids": list(range(i + 1)), "meta_info": {"completion_tokens": i + 1}}
                  for i in range(2)]
    incremental = [{"text": "x", "output_ids": [i], "meta_info": {"completion_tokens": i + 1}} for i in range(2)]
    for events in (cumulative, incremental):
        data = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
        merged, done = _events(merge_events(data))
        assert merged["output_ids"] == [0, 1] and merged["meta_info"]["completion_tokens"] == 2 and done == "[DONE]"
    plan = parse_server_args(["--model-path", "m", "--sim-fault-merge-chunks"]).sim_faults
    assert plan == FaultPlan(merge_chunks=True)
