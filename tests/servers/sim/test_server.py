"""The simulated server through a real process and real HTTP: shapes, errors, start-up, calibration."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import openai
import pytest
import requests
from conftest import REPO, spawn, stop, wait_ready

FAST = ["--sim-speedup", "50", "--random-seed", "1"]
E3 = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "d", "--speculative-num-steps", "3",
      "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]
FUSION = ["--enable-flashinfer-allreduce-fusion"]


def sse_events(resp: requests.Response) -> list[str]:
    return [line[len("data: "):] for line in resp.iter_lines(decode_unicode=True) if line.startswith("data: ")]


def test_health_503_then_200_and_startup_log(tmp_path):
    log = tmp_path / "sim.log"
    proc, port = spawn([*FAST, "--sim-startup-s", "50"], log)  # 1 s of wall start-up after bind
    try:
        seen = wait_ready(proc, f"http://127.0.0.1:{port}")
        assert 503 in seen and seen[-1] == 200 and seen.index(503) < len(seen) - 1
        text = log.read_text()
        order = ["server_args=ServerArgs(", "Load weight begin", "Capture cuda graph begin", "Uvicorn running",
                 "The server is fired up and ready to roll!"]
        positions = [text.index(s) for s in order]
        assert positions == sorted(positions)
    finally:
        stop(proc)


def test_native_generate_and_info(sim_factory):
    sim = sim_factory(*FAST, "--enable-metrics", *E3)
    body = {"input_ids": list(range(32)), "sampling_params": {"max_new_tokens": 20, "temperature": 0,
                                                              "ignore_eos": True}, "stream": True}
    with requests.post(sim.url + "/generate", json=body, stream=True, timeout=30) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = sse_events(r)
    assert events[-1] == "[DONE]"
    objs = [json.loads(e) for e in events[:-1]]
    counts = [o["meta_info"]["completion_tokens"] for o in objs]
    assert counts == sorted(counts) and counts[-1] == 20 and counts[0] == 1
    assert any(b - a > 1 for a, b in zip(counts, counts[1:], strict=False))  # a verify step carries several tokens
    assert all(o["meta_info"]["finish_reason"] is None for o in objs[:-1])
    last = objs[-1]["meta_info"]
    assert last["finish_reason"] == {"type": "length", "length": 20}
    assert last["prompt_tokens"] == 32 and last["spec_verify_ct"] >= 5 and last["spec_accept_length"] > 1
    assert last["e2e_latency"] > 0
    assert all(objs[i]["text"].startswith(objs[i - 1]["text"]) for i in range(1, len(objs)))

    r = requests.post(sim.url + "/generate", json={**body, "stream": False}, timeout=30).json()
    assert r["meta_info"]["completion_tokens"] == 20 and len(r["output_ids"]) == 20
    assert r["text"] == objs[-1]["text"]  # same prompt, greedy: same output

    info = requests.get(sim.url + "/get_server_info", timeout=5).json()
    assert info["backend"] == "sim" and info["speculative_algorithm"] == "EAGLE3" and info["tp_size"] == 8
    assert info["version"] == "0.5.9" and info["sim_version"].endswith("-sim") and info["sim_speedup"] == 50
    assert info["internal_states"][0]["avg_spec_accept_length"] > 1
    assert requests.get(sim.url + "/server_info", timeout=5).status_code == 200
    assert requests.get(sim.url + "/get_model_info", timeout=5).json()["is_generation"] is True
    assert requests.get(sim.url + "/v1/models", timeout=5).json()["data"][0]["id"] == "m"
    assert requests.post(sim.url + "/flush_cache", timeout=5).status_code == 200

    metrics = requests.get(sim.url + "/metrics", timeout=5).text
    for name in ("sglang:prompt_tokens_total", "sglang:generation_tokens_total", "sglang:num_running_reqs",
                 "sglang:gen_throughput", "sglang:time_to_first_token_seconds", "sglang:e2e_request_latency_seconds",
                 "sglang:spec_accept_length"):
        assert name in metrics


def test_stop_string_and_errors(sim_factory):
    sim = sim_factory(*FAST)
    r = requests.post(sim.url + "/generate", json={"text": "a b", "sampling_params": {"max_new_tokens": 50}},
                      timeout=30).json()
    words = r["text"].split()
    stop_word = words[3]
    r2 = requests.post(sim.url + "/generate", json={"text": "a b", "sampling_params": {
        "max_new_tokens": 50, "stop": [" " + stop_word]}}, timeout=30).json()
    assert r2["meta_info"]["finish_reason"]["type"] == "stop"
    assert r2["text"] == " " + " ".join(words[:3])

    bad = [b"{not json", b"[1, 2]", json.dumps({"sampling_params": {}}).encode(),
           json.dumps({"text": "x", "sampling_params": {"max_new_tokens": "many"}}).encode(),
           json.dumps({"text": 5}).encode()]
    for payload in bad:
        resp = requests.post(sim.url + "/generate", data=payload, timeout=10)
        assert 400 <= resp.status_code < 500, payload
        assert "error" in resp.json() or resp.json().get("object") == "error"
    resp = requests.post(sim.url + "/v1/chat/completions", json={"messages": "nope"}, timeout=10)
    assert resp.status_code == 400 and resp.json()["code"] == 400
    assert requests.get(sim.url + "/metrics", timeout=5).status_code == 404  # no --enable-metrics
    assert requests.get(sim.url + "/health", timeout=5).status_code == 200  # still alive


def test_openai_client(sim_factory):
    sim = sim_factory(*FAST)
    client = openai.OpenAI(base_url=sim.url + "/v1", api_key="none")
    c = client.completions.create(model="m", prompt="hello there", max_tokens=8)
    assert c.usage.completion_tokens == 8 and c.choices[0].finish_reason == "length" and c.choices[0].text
    chat = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=6)
    assert chat.choices[0].message.content and chat.usage.completion_tokens == 6
    stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=6,
                                            stream=True, stream_options={"include_usage": True})
    parts = list(stream)
    text = "".join(p.choices[0].delta.content or "" for p in parts if p.choices)
    assert text == chat.choices[0].message.content
    assert parts[-1].usage.completion_tokens == 6 and not parts[-1].choices
    cstream = list(client.completions.create(model="m", prompt="hello there", max_tokens=8, stream=True))
    assert "".join(p.choices[0].text for p in cstream) == c.choices[0].text
    assert cstream[-1].choices[0].finish_reason == "length"
    usage = [p.usage.completion_tokens for p in client.completions.create(
        model="m", prompt="hello there", max_tokens=8, stream=True,
        stream_options={"include_usage": True, "continuous_usage_stats": True})]  # SGLang's: the count so far
    assert usage == list(range(1, 9)) + [8]


def test_api_key(sim_factory):
    sim = sim_factory(*FAST, "--api-key", "sekret")
    assert requests.get(sim.url + "/health", timeout=5).status_code == 200
    r = requests.post(sim.url + "/generate", json={"text": "x"}, timeout=5)
    assert r.status_code == 401 and r.json()
    ok = requests.post(sim.url + "/generate", json={"text": "x", "sampling_params": {"max_new_tokens": 2}},
                       headers={"Authorization": "Bearer sekret"}, timeout=10)
    assert ok.status_code == 200
    assert openai.OpenAI(base_url=sim.url + "/v1", api_key="sekret").models.list().data[0].id == "m"


def test_unknown_flag_exits_2():
    p = subprocess.run([sys.executable, "-m", "framework.servers.sim", "--model-path", "m", "--bogus-flag"],
                       cwd=REPO, capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "usage:" in p.stderr and "--bogus-flag" in p.stderr


def test_cu128_fusion_crashes_during_startup(tmp_path):
    log = tmp_path / "crash.log"
    proc, port = spawn([*FAST, "--sim-profile", "rtx_pro_6000_tp8_cu128", *FUSION], log)
    try:
        assert proc.wait(30) == 1
    finally:
        stop(proc)
    text = log.read_text()
    assert "Traceback (most recent call last)" in text
    assert "RuntimeError: No supported CUDA architectures found for major versions [9, 10]" in text
    assert "fired up" not in text


def measure(url: str, speedup: float, output_tokens: int = 256) -> tuple[float, list[dict]]:
    """Client-side decode tok/s on the model clock: (completion_tokens - 1) / (t_last - t_first), the times
    being the sim's own timestamps carried in the stream (meta_info.sim_model_t)."""
    body = {"input_ids": list(range(128)), "stream": True,
            "sampling_params": {"max_new_tokens": output_tokens, "temperature": 0, "ignore_eos": True}}
    times, metas = [], []
    with requests.post(url + "/generate", json=body, stream=True, timeout=120) as r:
        for line in r.iter_lines(chunk_size=None, decode_unicode=True):
            if line.startswith("data: {"):
                times.append(time.perf_counter())
                metas.append(json.loads(line[6:])["meta_info"])
    n = metas[-1]["completion_tokens"]
    return (n - 1) / (metas[-1]["sim_model_t"] - metas[0]["sim_model_t"]), metas


@pytest.mark.parametrize("flags,target", [([], 92.6), (FUSION, 92.7), (E3, 54.1), (E3 + FUSION, 96.1)],
                         ids=["baseline", "fusion", "eagle3", "eagle3+fusion"])
def test_seed_calibration_through_http(sim_factory, flags, target, tmp_path):
    speedup = 20
    gt = tmp_path / "gt.jsonl"
    sim = sim_factory("--sim-speedup", str(speedup), "--sim-noise-scale", "0", "--sim-startup-s", "0",
                      "--sim-ground-truth", str(gt), *flags)
    measure(sim.url, speedup, output_tokens=8)  # warm-up
    rate, metas = measure(sim.url, speedup)
    assert metas[-1]["completion_tokens"] == 256
    # the model clock is exact whatever the machine's load; the calibration is within 0.2% of the seed
    assert rate == pytest.approx(target, rel=0.002)
    lines = [json.loads(ln) for ln in gt.read_text().splitlines()]
    last = [row for row in lines if row["rid"] == metas[-1]["id"]]
    assert sum(row["tokens"] for row in last) == 256 and last[-1]["finished"]
    assert [row["model_t"] for row in last] == pytest.approx([m["sim_model_t"] for m in metas], abs=1e-8)
