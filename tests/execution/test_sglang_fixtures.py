"""The `sglang` backend against what SGLang 0.5.9's own server really printed and answered.

The recordings in tests/fixtures/sglang_0_5_9/ come from one run of SGLang 0.5.9 on a CPU with a
stand-in for its kernel package (tools/sglang_fixtures/record.sh; its README says what they are
evidence for). Here: the row's failure patterns on its real logs, the client's stream parsing on
its real events, and the server-info lookups on its real bodies. Pure; no SGLang is installed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from framework.execution.backends import BACKENDS, BackendSettings, backend_label
from framework.execution.client.stream import StreamParser, sse_data, summarize_stream
from framework.execution.failures import classify, match_line
from framework.records.environment import backend_environment

FIXTURES = Path(__file__).parent.parent / "fixtures" / "sglang_0_5_9"
SGLANG = BACKENDS["sglang"].failure_patterns
CLASSIFY_LINES = 400  # what the runner reads (framework.run.launch)
BACKENDS_SETTINGS = BackendSettings(name="sglang")


def log(name: str) -> list[str]:
    return (FIXTURES / name).read_text().splitlines()


def meta(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


def response(name: str) -> dict:
    return json.loads((FIXTURES / "responses" / f"{name}.json").read_text())


@pytest.mark.parametrize("name, cls, words", [
    ("missing_module", "missing_module", "No module named 'torchvision'"),
    ("extension_mismatch", "extension_mismatch", "operator torchvision::nms does not exist"),
    ("bad_flag", "bad_flag", "unrecognized arguments: --no-such-flag 1"),
])
def test_sglangs_own_startup_failures_get_their_class_and_line(name, cls, words):
    recorded = meta(f"{name}.json")
    failure = classify(recorded["exit_code"], log(f"{name}.log")[-CLASSIFY_LINES:], SGLANG)
    assert failure.cls == cls and words in failure.line
    assert recorded["exit_code"] == (2 if cls == "bad_flag" else 1)


def test_the_bad_flag_error_comes_after_the_whole_usage_text_which_never_matches():
    lines = log("bad_flag.log")
    usage = next(i for i, ln in enumerate(lines) if ln.startswith("usage:"))
    assert len(lines) - usage > 100  # SGLang prints its whole usage first
    failure = classify(2, lines[-CLASSIFY_LINES:], SGLANG)  # the runner's window starts inside the usage text
    assert failure.line == "launch_server.py: error: unrecognized arguments: --no-such-flag 1"


def test_a_healthy_start_up_and_serving_log_matches_no_failure_pattern():
    # ServerArgs(...) names mem_fraction_static, and the KV pool lines name the cache: none is a failure
    for name in ("startup.log", "serving_and_teardown.log"):
        assert match_line(log(name), SGLANG) is None, name


def test_a_scheduler_crash_after_ready_shows_the_signal_and_the_cause_not_sglangs_sigquit_line():
    # a token id beyond the vocabulary killed SGLang 0.5.9's scheduler, and the server with it (exit -9)
    recorded = meta("crash_after_ready.json")
    assert recorded["exit_code"] == -9 and recorded["answer"]["exception"] == "ConnectionError"
    lines = log("crash_after_ready.log")
    assert any("SIGQUIT received" in ln for ln in lines)
    failure = classify(recorded["exit_code"], lines[-CLASSIFY_LINES:], SGLANG, after_ready=True)
    # the signal first (issue 31), then the cause the log names before it
    assert failure.cls == "crash_after_ready"
    assert failure.line == ("ended by SIGKILL (signal 9); the log's last error before it: "
                            "IndexError: index out of range in self")


def test_sglang_ends_its_own_tree_by_sigkill_after_sigterm_and_leaves_no_orphans():
    # the exit code the launcher sees after its own SIGTERM: -9, which must not read as a crash (run.launch)
    served = meta("serve.json")
    assert served["sigterm_exit_code"] == -9 and served["orphans_after_stop"] == 0
    assert served["health_during_startup"][-1][1] == 200


def events(name: str) -> list[bytes]:
    recorded = response(name)
    assert recorded["status"] == 200 and recorded["content_type"].startswith("text/event-stream")
    return [sse_data(b"data: " + e.encode()) for e in recorded["events"]]


@pytest.mark.parametrize("name, endpoint, tokens, counted", [
    ("generate_stream_input_ids", "generate", 16, 16),  # the body the framework's client sends
    ("generate_stream", "generate", 8, 8),
    ("completions_stream", "completions", 8, 8),
    # 8 tokens in 7 content chunks: SGLang's detokenizer held back a token that ended inside a UTF-8
    # character and sent it with the next one, so only the final usage has the true count
    ("chat_stream", "chat", 8, 7),
])
def test_the_clients_parser_reads_sglangs_real_stream_events(name, endpoint, tokens, counted):
    data = events(name)
    assert data[-1] == b"[DONE]"
    parser = StreamParser(endpoint)
    counts = [parser.event(d) for d in data[:-1]]
    assert parser.finished
    assert sum(counts) == counted and all(n in (0, 1) for n in counts)
    if endpoint == "generate":
        assert parser.meta["completion_tokens"] == tokens and parser.meta["finish_reason"]["type"] == "length"
        assert parser.meta["e2e_latency"] > 0
    else:
        assert parser.usage["completion_tokens"] == tokens
    times = [0.1 * (i + 1) for i in range(len(counts))]
    figures = summarize_stream(times, counts, e2e=times[-1], time_scale=1.0, meta=parser.meta,
                               completion=parser.usage["completion_tokens"] if parser.usage else None)
    assert figures["completion_tokens"] == tokens and figures["decode_tok_s"] is not None


def test_sglangs_generate_meta_info_carries_what_the_client_reads():
    last = json.loads(events("generate_stream_input_ids")[-2])["meta_info"]
    for key in ("completion_tokens", "prompt_tokens", "cached_tokens", "finish_reason", "e2e_latency", "id"):
        assert key in last, key
    assert last["prompt_tokens"] == len(response("generate_stream_input_ids")["request"]["input_ids"])


def test_server_info_from_sglangs_current_route_names_the_version_and_is_not_the_sim():
    info = response("server_info")["body"]
    assert response("get_server_info")["body"].keys() == info.keys()  # the deprecated route says the same
    assert BACKENDS["sglang"].info_paths[0] == "/server_info"
    assert backend_label(BACKENDS_SETTINGS, info) == "sglang"
    env = backend_environment(version_package=None, version_argv=(), build_info_argv=(), python=None, values={},
                              model_path="m", model_is_local=False, server_info=info)
    assert env["server_version"] == "0.5.9" and env["server_version_source"] == "server info"
    assert response("version")["status"] == 404  # /version is vLLM's, not SGLang's


def test_the_deprecated_route_warns_in_sglangs_log():
    assert any("get_server_info" in ln and "deprecated" in ln.lower() for ln in log("serving_and_teardown.log"))
