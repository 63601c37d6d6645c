"""The GPU server (tiny shape, CPU) through a real process and real HTTP: the API the sim answers.

One server per module keeps this fast; it runs speculative decoding so the verify-pass fields show.
The assertions mirror tests/servers/sim/test_server.py: both servers share one HTTP layer, this checks the
GPU engine behind it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from cli_helpers import ROOT, stop_group

pytest.importorskip("torch", reason="the GPU server needs torch (pip install -e '.[gpu]')")
openai = pytest.importorskip("openai")
pytestmark = pytest.mark.gpu  # the GPU server on the CPU (torch): its own tier, `pytest -m gpu`

SPEC = ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "4", "--speculative-accept-rate", "0.5"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(tmp: Path, *args: str) -> tuple[subprocess.Popen, str, Path]:
    port = _free_port()
    log = tmp / f"gpu-{port}.log"
    argv = [sys.executable, "-m", "framework.servers.gpu", "--model-path", "tiny", "--served-model-name", "m",
            "--context-length", "128", "--port", str(port), "--random-seed", "1", *args]
    with open(log, "w") as fh:
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    seen = []
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited {proc.returncode}: {log.read_text()}")
        try:
            seen.append(requests.get(url + "/health", timeout=2).status_code)
            if seen[-1] == 200:
                return proc, url, log
        except requests.ConnectionError:
            pass
        time.sleep(0.05)
    raise TimeoutError(log.read_text())


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    proc, url, log = start(tmp_path_factory.mktemp("gpu"), "--enable-metrics", *SPEC)
    yield url, log
    stop_group(proc, grace=15)


def test_stream_generate_info_and_metrics(server):
    url, log = server
    body = {"input_ids": list(range(1000, 1024)), "stream": True,
            "sampling_params": {"max_new_tokens": 16, "temperature": 0, "ignore_eos": True}}
    with requests.post(url + "/generate", json=body, stream=True, timeout=60) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = [line[6:] for line in r.iter_lines(decode_unicode=True) if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    metas = [json.loads(e)["meta_info"] for e in events[:-1]]
    counts = [m["completion_tokens"] for m in metas]
    assert counts[0] == 1 and counts[-1] == 16 and counts == sorted(counts)
    last = metas[-1]
    assert last["finish_reason"] == {"type": "length", "length": 16} and last["prompt_tokens"] == 24
    assert last["spec_verify_ct"] >= 4 and 1 <= last["spec_accept_length"] <= 4
    assert "sim_speedup" not in last

    again = requests.post(url + "/generate", json={**body, "stream": False}, timeout=60).json()
    assert again["meta_info"]["completion_tokens"] == 16 and len(again["output_ids"]) == 16
    assert again["text"] == json.loads(events[-2])["text"]  # same prompt, greedy, same draws: same output

    info = requests.get(url + "/get_server_info", timeout=5).json()
    assert info["backend"] == "gpu" and info["model_path"] == "tiny"
    assert info["gpu_server"]["speculative_acceptance"] == "declared"
    assert info["gpu_server"]["speculative_accept_rate"] == 0.5
    assert info["speculative_num_draft_tokens"] == 4 and info["hardware"]["torch"]
    assert info["internal_states"][0]["avg_spec_accept_length"] >= 1
    assert requests.get(url + "/v1/models", timeout=5).json()["data"][0]["id"] == "m"
    assert requests.post(url + "/flush_cache", timeout=5).status_code == 200
    metrics = requests.get(url + "/metrics", timeout=5).text
    for name in ("sglang:prompt_tokens_total", "sglang:generation_tokens_total", "sglang:time_to_first_token_seconds",
                 "sglang:spec_accept_length"):
        assert name in metrics
    text = log.read_text()
    assert text.index("Load weight end") < text.index("The server is fired up and ready to roll!")


def test_greedy_is_deterministic_and_concurrent_requests_batch(server):
    url, _ = server
    body = {"input_ids": [list(range(7 * i, 7 * i + 9)) for i in range(4)],
            "sampling_params": [{"max_new_tokens": 6, "ignore_eos": True}] * 4}
    first = requests.post(url + "/generate", json=body, timeout=60).json()
    second = requests.post(url + "/generate", json=body, timeout=60).json()
    assert [r["meta_info"]["completion_tokens"] for r in first] == [6] * 4
    assert [r["output_ids"] for r in second] == [r["output_ids"] for r in first]
    assert len({tuple(r["output_ids"]) for r in first}) > 1


def test_stop_strings_and_errors(server):
    url, _ = server
    r = requests.post(url + "/generate", json={"text": "a b", "sampling_params": {"max_new_tokens": 12}},
                      timeout=60).json()
    words = r["text"].split()
    cut = next(i for i, w in enumerate(words) if i and w not in words[:i])
    r2 = requests.post(url + "/generate", json={"text": "a b", "sampling_params": {
        "max_new_tokens": 12, "stop": [" " + words[cut]]}}, timeout=60).json()
    assert r2["meta_info"]["finish_reason"] == {"type": "stop", "matched": " " + words[cut]}
    assert r2["text"] == " " + " ".join(words[:cut])
    for payload in (b"{not json", b"[1, 2]", json.dumps({"sampling_params": {}}).encode(),
                    json.dumps({"text": "x", "sampling_params": {"max_new_tokens": "many"}}).encode()):
        resp = requests.post(url + "/generate", data=payload, timeout=10)
        assert 400 <= resp.status_code < 500, payload
    assert requests.post(url + "/v1/chat/completions", json={"messages": "nope"}, timeout=10).status_code == 400
    assert requests.get(url + "/health", timeout=5).status_code == 200


def test_openai_client(server):
    url, _ = server
    client = openai.OpenAI(base_url=url + "/v1", api_key="none")
    c = client.completions.create(model="m", prompt="hello there", max_tokens=8)
    assert c.usage.completion_tokens == 8 and c.choices[0].finish_reason == "length" and c.choices[0].text
    parts = list(client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}],
                                                max_tokens=6, stream=True, stream_options={"include_usage": True}))
    assert "".join(p.choices[0].delta.content or "" for p in parts if p.choices)
    assert parts[-1].usage.completion_tokens == 6


def test_bad_flags_and_models_exit_2():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-m", "framework.servers.gpu", "--model-path", "tiny", "--bogus-flag"],
                       cwd=ROOT, capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 2 and "--bogus-flag" in p.stderr
    p = subprocess.run([sys.executable, "-m", "framework.servers.gpu", "--model-path", "no-such-model"],
                       cwd=ROOT, capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 2 and "llama-1b" in p.stderr and "Traceback" not in p.stderr
