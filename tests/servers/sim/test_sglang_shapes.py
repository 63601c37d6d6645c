"""The sim's API against what SGLang 0.5.9's own server answered to the same requests.

Each recorded request in tests/fixtures/sglang_0_5_9/responses/ (tools/sglang_fixtures/record.sh)
is replayed on the sim: same status, same keys, same number of stream events, the same `[DONE]`.
The differences that remain are pinned here, so one that appears or goes away fails the test;
docs/model.md ("Against SGLang 0.5.9's recorded answers") says why each remains.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import requests

FIXTURES = Path(__file__).parents[2] / "fixtures" / "sglang_0_5_9" / "responses"
RECORDED = sorted(p.stem for p in FIXTURES.glob("*.json"))

# the sim's own keys (its clock and model), documented as extras in docs/model.md
SIM_META = {"sim_arrival_model_s", "sim_first_lag_s", "sim_last_lag_s", "sim_max_lag_s", "sim_mean_batch",
            "sim_model_t", "sim_speedup", "prompt_tokens_estimated"}
ESTIMATED = {"prompt_tokens_estimated"}  # a text prompt's count: the stand-in tokenizer's (servers/api/tokens.py)
SIM_CHUNK = {"sim_arrival_model_s", "sim_mean_batch", "sim_model_t"}
SIM_INFO = {"backend", "config", "sim_context_length", "sim_hardware", "sim_noise_scale", "sim_profile",
            "sim_profile_description", "sim_speedup", "sim_stack", "sim_version"}
# SGLang's keys the sim does not send (docs/model.md says why)
REAL_ONLY_META = {"cached_tokens_details", "prefill_finished_ts", "prefill_launch_delay", "prefill_launch_latency",
                  "queue_time", "response_sent_to_client_ts", "total_retractions", "weight_version",
                  "decode_finished_ts", "decode_throughput", "inference_time", "request_received_ts",
                  "request_sent_to_scheduler_ts"}
REAL_ONLY_INFO = {"max_req_input_len", "max_total_num_tokens", "status"}
REAL_ONLY_CHOICE = {"matched_stop"}
REAL_ONLY_DELTA = {"reasoning_content", "tool_calls", "role"}  # SGLang sends each, null when unused
REAL_ONLY_USAGE = {"prompt_tokens_details", "reasoning_tokens"}
REAL_ONLY_BODY = {"completions": {"metadata"},
                  "get_model_info": {"architectures", "has_audio_understanding", "has_image_understanding",
                                     "model_type"}}
# a bad value SGLang checks in its own code and the sim in its pydantic models: same status, other words
OTHER_ERROR_ENVELOPE = {"error_generate_bad_max_new_tokens"}


def recorded(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


@pytest.fixture(scope="module")
def sim_url(tmp_path_factory):
    from conftest import spawn, stop, wait_ready

    proc, port = spawn(["--sim-speedup", "50", "--enable-metrics", "--random-seed", "1"],
                       tmp_path_factory.mktemp("shapes") / "sim.log")
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(proc, url)
        yield url
    finally:
        stop(proc)


def replay(url: str, rec: dict) -> requests.Response:
    body = rec.get("request")
    if isinstance(body, dict) and "model" in body:
        body = {**body, "model": "m"}  # the sim serves model id `m` (SGLang: the model path)
    return requests.request(rec["method"], url + rec["path"], json=body, stream="events" in rec, timeout=60)


def sse(resp: requests.Response) -> list[str]:
    return [ln[len("data:"):].strip() for ln in resp.iter_lines(decode_unicode=True) if ln and ln.startswith("data:")]


def test_every_recorded_request_is_replayed():
    assert len(RECORDED) >= 18 and "server_info" in RECORDED and "chat_stream" in RECORDED


@pytest.mark.parametrize("name", RECORDED)
def test_the_sim_answers_each_recorded_request_as_sglang_did(sim_url, name):
    rec = recorded(name)
    resp = replay(sim_url, rec)
    assert resp.status_code == rec["status"]
    if "events" in rec:
        real = [json.loads(e) for e in rec["events"][:-1]]
        got_raw = sse(resp)
        assert got_raw[-1] == rec["events"][-1] == "[DONE]"
        got = [json.loads(e) for e in got_raw[:-1]]
        if name == "chat_stream":
            # SGLang's detokenizer held one of the 8 tokens back (it ended inside a UTF-8 character) and sent it
            # with the next, so 7 content chunks; the sim sends 8. The rest lines up: the role chunk first, then
            # the content, then the finish reason in a chunk of its own, then usage.
            assert len(got) == len(real) + 1
            assert got[-2]["choices"][0]["delta"]["content"] is None and got[-2]["choices"][0]["finish_reason"]
            assert all(e["choices"][0]["finish_reason"] is None for e in got[:-2])
            got = got[:-3] + got[-2:]
        assert len(got) == len(real)  # one event per token, plus (OpenAI) the finish and usage chunks
        for a, b in zip(real, got, strict=True):
            compare_event(name, a, b)
        return
    real_body = rec.get("body", rec.get("text"))
    try:
        body = resp.json()
    except ValueError:
        body = resp.text
    if not isinstance(real_body, dict):
        assert type(body) is type(real_body)
        return
    if name in OTHER_ERROR_ENVELOPE:
        assert set(real_body) == {"error"} and set(body) == {"code", "message", "object", "param", "type"}
        return
    extra = SIM_INFO if name in ("server_info", "get_server_info") else set()
    missing = REAL_ONLY_INFO if name in ("server_info", "get_server_info") else REAL_ONLY_BODY.get(name, set())
    assert set(body) - set(real_body) == extra
    assert set(real_body) - set(body) == missing
    if name.startswith("error_") and "message" in real_body:
        assert isinstance(body["message"], str) and body["code"] == real_body["code"]
    if name == "server_info":
        assert body["version"] == real_body["version"] == "0.5.9"


def compare_event(name: str, real: dict, got: dict) -> None:
    if "meta_info" in real:
        assert set(got) - set(real) == {"index"}  # the sim numbers its one prompt; SGLang omits index then
        assert set(real["meta_info"]) - set(got["meta_info"]) == REAL_ONLY_META & set(real["meta_info"])
        assert set(got["meta_info"]) - set(real["meta_info"]) <= SIM_META
        assert got["meta_info"]["completion_tokens"] == real["meta_info"]["completion_tokens"]
        assert (got["meta_info"]["finish_reason"] is None) == (real["meta_info"]["finish_reason"] is None)
        assert len(got["output_ids"]) == len(real["output_ids"])
        return
    assert set(got) - set(real) <= SIM_CHUNK and set(real) <= set(got)
    # usage on every chunk where the request asked `stream_options.continuous_usage_stats`, as SGLang does
    assert (got.get("usage") is None) == (real.get("usage") is None)
    if real.get("usage") and got.get("usage"):
        assert set(real["usage"]) - set(got["usage"]) <= REAL_ONLY_USAGE
        assert set(got["usage"]) - set(real["usage"]) <= ESTIMATED
        assert got["usage"]["completion_tokens"] == real["usage"]["completion_tokens"]
    assert len(got["choices"]) == len(real["choices"])
    if real["choices"]:
        a, b = real["choices"][0], got["choices"][0]
        assert set(a) - set(b) <= REAL_ONLY_CHOICE and set(b) <= set(a)  # the sim: matched_stop on the finish only
        assert a["finish_reason"] == b["finish_reason"]
        if "delta" in a:
            assert set(a["delta"]) - set(b["delta"]) <= REAL_ONLY_DELTA
            assert a["delta"].get("role") == b["delta"].get("role") or a["delta"].get("role") is None


def _families(text: str) -> dict[str, tuple[str, set[frozenset[str]], set[str]]]:
    """name -> (type, the label-name sets of its samples, le bounds) of a Prometheus text page."""
    from prometheus_client.parser import text_string_to_metric_families

    out = {}
    for fam in text_string_to_metric_families(text):
        labels = {frozenset(k for k in smp.labels if k != "le") for smp in fam.samples}
        bounds = {smp.labels["le"] for smp in fam.samples if "le" in smp.labels}
        out[fam.name] = (fam.type, labels, bounds)
    return out


def test_metrics_have_sglangs_families_labels_and_buckets(sim_url):
    """Every family the sim exports is one SGLang 0.5.9 exported (tests/fixtures/sglang_0_5_9/metrics.txt), of the
    same type, with the same label names and histogram buckets; the ones tools read are all there."""
    requests.post(sim_url + "/generate", json={"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 4}},
                  timeout=60).raise_for_status()
    real = _families((FIXTURES.parent / "metrics.txt").read_text())
    got = _families(requests.get(sim_url + "/metrics", timeout=10).text)
    assert set(got) <= set(real), set(got) - set(real)
    for name, (kind, labels, bounds) in got.items():
        assert (kind, labels, bounds) == real[name], name
    read = {"sglang:prompt_tokens", "sglang:generation_tokens", "sglang:num_requests", "sglang:cached_tokens",
            "sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:gen_throughput", "sglang:spec_accept_length",
            "sglang:time_to_first_token_seconds", "sglang:e2e_request_latency_seconds",
            "sglang:inter_token_latency_seconds"}
    assert read <= set(got)


def test_a_text_prompts_token_count_is_marked_estimated_and_an_ids_prompts_is_not(sim_url):
    text = {"text": "Say this is a test", "sampling_params": {"max_new_tokens": 2}}
    ids = {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 2}}
    meta = [requests.post(sim_url + "/generate", json=b, timeout=60).json()["meta_info"] for b in (text, ids)]
    assert meta[0]["prompt_tokens_estimated"] is True and "prompt_tokens_estimated" not in meta[1]
    assert meta[1]["prompt_tokens"] == 3
    chat = requests.post(sim_url + "/v1/chat/completions", timeout=60, json={
        "model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}).json()
    assert chat["usage"]["prompt_tokens_estimated"] is True
    done = requests.post(sim_url + "/v1/completions", timeout=60,
                         json={"model": "m", "prompt": [5, 6], "max_tokens": 2})
    assert "prompt_tokens_estimated" not in done.json()["usage"]
