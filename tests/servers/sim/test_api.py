"""The API as SGLang 0.5.9 serves it: chat TTFT, per-token ITL, routes, context length, EOS,
abandoned requests, bad bodies. One sim process for most checks (module fixture), so this stays fast."""

from __future__ import annotations

import json
import socket
import time

import pytest
import requests
from conftest import spawn, stop, wait_ready

from framework.servers.api import tokens
from framework.servers.sim import model
from framework.servers.sim.expected import expected_metrics
from framework.servers.sim.profile import load_profile

E3 = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
      "--speculative-num-draft-tokens", "4"]


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    log = tmp_path_factory.mktemp("api") / "sim.log"
    proc, port = spawn(["--sim-speedup", "5", "--sim-noise-scale", "0", "--sim-startup-s", "10",
                        "--enable-metrics", "--context-length", "4096", *E3], log)
    url = f"http://127.0.0.1:{port}"
    early = None
    for _ in range(500):  # /v1/models answers 503 until the model is "loaded", like /health
        try:
            early = requests.get(url + "/v1/models", timeout=2).status_code
            break
        except requests.ConnectionError:
            time.sleep(0.01)
    wait_ready(proc, url)
    yield url, early
    stop(proc)


def sse(resp: requests.Response) -> list[tuple[float, dict]]:
    """(wall arrival, JSON) of every data event; a vLLM-style client times each chunk as it arrives."""
    out = []
    for line in resp.iter_lines(chunk_size=None, decode_unicode=True):
        if line.startswith("data: {"):
            out.append((time.perf_counter(), json.loads(line[6:])))
    return out


def test_chat_ttft_as_a_vllm_style_client_measures_it(sim):
    url, _ = sim
    body = {"model": "m", "messages": [{"role": "user", "content": "word " * 100}], "max_tokens": 16,
            "stream": True, "ignore_eos": True}
    t0 = time.perf_counter()
    with requests.post(url + "/v1/chat/completions", json=body, stream=True, timeout=60) as r:
        events = sse(r)
    first_t, first = events[0]
    assert first["choices"][0]["delta"].get("role") == "assistant"
    n_prompt = tokens.count_text_tokens("word " * 100) + 4
    expected = expected_metrics("rtx_pro_6000_tp8", ["--tp-size", "8", *E3, "--sim-noise-scale", "0"],
                                      n_prompt, 16)["ttft_s"]
    # the role chunk now comes with the first token, after prefill (it came before prefill: TTFT -99%)
    assert first["sim_model_t"] == pytest.approx(expected, rel=1e-6)
    assert (first_t - t0) * 5 >= 0.95 * expected  # the wall clock cannot see it before the model's prefill ended
    assert events[1][1]["choices"][0]["delta"].get("content")


def test_prometheus_itl_counts_tokens_not_chunks(sim):
    url, _ = sim

    def itl() -> tuple[float, float]:
        text = requests.get(url + "/metrics", timeout=5).text
        lines = text.splitlines()
        count = sum(float(ln.split()[-1]) for ln in lines if ln.startswith("sglang:inter_token_latency_seconds_count"))
        total = sum(float(ln.split()[-1]) for ln in lines if ln.startswith("sglang:inter_token_latency_seconds_sum"))
        return count, total

    c0, s0 = itl()
    body = {"input_ids": list(range(64)), "stream": True,
            "sampling_params": {"max_new_tokens": 40, "ignore_eos": True, "temperature": 0}}
    with requests.post(url + "/generate", json=body, stream=True, timeout=60) as r:
        metas = [e["meta_info"] for _, e in sse(r)]
    c1, s1 = itl()
    # EAGLE-3 chunks
    assert any(b["completion_tokens"] - a["completion_tokens"] > 1 for a, b in zip(metas, metas[1:], strict=False))
    assert c1 - c0 == 40 - 1  # one observation per token after the first (SGLang), not per chunk
    assert s1 - s0 == pytest.approx(metas[-1]["sim_model_t"] - metas[0]["sim_model_t"], rel=1e-6)
    assert "e2e_latency" in metas[-1] and all("e2e_latency" not in m for m in metas[:-1])


def test_routes_sglang_serves(sim):
    url, early = sim
    assert early == 503
    assert requests.get(url + "/v1/models", timeout=5).json()["data"][0]["max_model_len"] == 4096
    assert requests.get(url + "/v1/models/m", timeout=5).json()["id"] == "m"
    missing = requests.get(url + "/v1/models/other", timeout=5)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"
    load = requests.get(url + "/get_load", timeout=5).json()
    assert isinstance(load, list) and {"num_reqs", "num_waiting_reqs", "dp_rank"} <= set(load[0])
    assert requests.post(url + "/abort_request", json={"rid": "nope"}, timeout=5).status_code == 200
    assert requests.post(url + "/start_profile", timeout=5).text == "Start profiling.\n"
    assert requests.get(url + "/stop_profile", timeout=5).status_code == 200
    assert requests.get(url + "/ping", timeout=5).status_code == 200


def test_stream_events_carry_output_ids_and_context_length_is_checked(sim):
    url, _ = sim
    body = {"input_ids": list(range(10)), "stream": True, "sampling_params": {"max_new_tokens": 5, "ignore_eos": True}}
    with requests.post(url + "/generate", json=body, stream=True, timeout=60) as r:
        events = [e for _, e in sse(r)]
    assert [len(e["output_ids"]) for e in events] == [e["meta_info"]["completion_tokens"] for e in events]
    long = {"input_ids": list(range(5000)), "sampling_params": {"max_new_tokens": 5}}
    r = requests.post(url + "/generate", json=long, timeout=10)
    assert r.status_code == 400
    assert "longer than the model's context length (4096 tokens)" in r.json()["error"]["message"]
    r = requests.post(url + "/v1/completions", json={"model": "m", "prompt": list(range(4000)), "max_tokens": 200},
                      timeout=10)
    assert r.status_code == 400 and "maximum context length of 4096" in r.json()["message"]


def test_eos_ends_a_sequence_unless_ignore_eos(sim):
    url, _ = sim
    prof = load_profile("rtx_pro_6000_tp8")
    ids = list(range(7, 39))
    eos = model.eos_position(prof, tokens.prompt_seed(ids), 0.0)
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": 3000, "temperature": 0}}
    r = requests.post(url + "/generate", json=body, timeout=120).json()
    assert r["meta_info"]["completion_tokens"] == min(eos, 3000)
    assert r["meta_info"]["finish_reason"] == {"type": "stop", "matched": 1}
    body["sampling_params"].update(ignore_eos=True, max_new_tokens=eos + 5)
    r = requests.post(url + "/generate", json=body, timeout=120).json()
    assert r["meta_info"]["completion_tokens"] == eos + 5 and r["meta_info"]["finish_reason"]["type"] == "length"


def test_an_abandoned_request_stops(sim):
    url, _ = sim
    host, port = url.removeprefix("http://").split(":")
    payload = json.dumps({"input_ids": list(range(64)), "sampling_params": {"max_new_tokens": 3000,
                                                                             "ignore_eos": True}}).encode()
    with socket.create_connection((host, int(port))) as s:  # a non-streaming request, then the client leaves
        s.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
                  + str(len(payload)).encode() + b"\r\n\r\n" + payload)
        deadline = time.monotonic() + 10
        while requests.get(url + "/get_load", timeout=5).json()[0]["num_reqs"] == 0:
            assert time.monotonic() < deadline
            time.sleep(0.02)
    deadline = time.monotonic() + 10
    while requests.get(url + "/get_load", timeout=5).json()[0]["num_reqs"] > 0:
        assert time.monotonic() < deadline, "the abandoned request kept running"
        time.sleep(0.05)


@pytest.mark.parametrize("path,body", [
    ("/generate", b"{not json"), ("/generate", b"[1, 2]"), ("/generate", b'{"text": 5}'),
    ("/generate", b'{"text": "a", "sampling_params": {"max_new_tokens": "x"}}'),
    ("/generate", b'{"input_ids": [], "sampling_params": {}}'), ("/generate", b"{}"),
    ("/v1/completions", b'{"prompt": null}'), ("/v1/completions", b'{"prompt": "a", "n": 3}'),
    ("/v1/chat/completions", b'{"messages": []}'), ("/v1/chat/completions", b'{"messages": [{"content": "x"}]}'),
    ("/v1/chat/completions", b'{"messages": "hi"}'), ("/abort_request", b"[]"),
])
def test_bad_bodies_get_a_4xx_never_a_500(sim, path, body):
    url, _ = sim
    r = requests.post(url + path, data=body, headers={"Content-Type": "application/json"}, timeout=10)
    assert 400 <= r.status_code < 500, (path, body, r.status_code, r.text[:200])
