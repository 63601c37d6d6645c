"""Record what SGLang's own server really answers, as test fixtures (run by record.sh, never in CI).

usage: python record.py failure NAME OUT_DIR MODEL_DIR [extra server flags...]
       python record.py serve OUT_DIR MODEL_DIR
       python record.py crash OUT_DIR MODEL_DIR

`failure` starts `python -m sglang.launch_server` with extra flags that make it fail and keeps its
log and exit code (OUT_DIR/NAME.log, NAME.json). `serve` starts it with the CPU settings of
record.sh, waits for `/health`, asks every route the framework uses (and bad requests), stops it
with SIGTERM and keeps the start-up and teardown logs, the exit code and each raw response.
`crash` starts it the same way and sends one request with a token id beyond the vocabulary,
which SGLang 0.5.9 on a CPU does not refuse: its scheduler dies, and the whole server with it
(found while recording); the log and the exit code are kept as a crash after ready.

Only the standard library and `requests` are used, so it runs in SGLang's own venv. Paths of the
recording machine are replaced in what is kept (MODEL -> /models/tiny-llama, the venv -> /venv,
the base Python -> /python).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import requests

MODEL_ALIAS = "/models/tiny-llama"
VENV_ALIAS = "/venv"
# SGLang on a CPU without its CPU kernels: torch-native attention, a small KV pool (without
# --max-total-tokens it sizes the pool from host RAM), metrics on, the CPU engine.
SERVE_FLAGS = ["--device", "cpu", "--attention-backend", "torch_native", "--sampling-backend", "pytorch",
               "--max-total-tokens", "4096", "--max-running-requests", "8", "--enable-metrics",
               "--random-seed", "1", "--log-level", "info"]
ENV = {"SGLANG_USE_CPU_ENGINE": "1", "OMP_NUM_THREADS": "1"}
READY_TIMEOUT_S = 900.0
STOP_TIMEOUT_S = 180.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Scrub:
    def __init__(self, model: str) -> None:
        self.pairs = [(str(Path(model).resolve()), MODEL_ALIAS), (model, MODEL_ALIAS), (sys.prefix, VENV_ALIAS),
                      (sys.base_prefix, "/python")]

    def __call__(self, text: str) -> str:
        for old, new in self.pairs:
            text = text.replace(old, new)
        return text


def argv(model: str, port: int, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "sglang.launch_server", "--model-path", model, "--host", "127.0.0.1",
            "--port", str(port), *extra]


def start(model: str, port: int, extra: list[str], log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, **ENV}
    with open(log, "wb") as f:
        return subprocess.Popen(argv(model, port, extra), stdout=f, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)


def failure(name: str, out: Path, model: str, extra: list[str]) -> None:
    """Start SGLang with flags that make it fail; keep the log and the exit code."""
    scrub = Scrub(model)
    port = free_port()
    raw = out / f"{name}.raw.log"
    t0 = time.monotonic()
    proc = start(model, port, extra, raw)
    try:
        code = proc.wait(timeout=READY_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        code = proc.wait()
    (out / f"{name}.log").write_text(scrub(raw.read_text(errors="replace")))
    raw.unlink()
    meta = {"argv_extra": extra, "exit_code": code, "wall_s": round(time.monotonic() - t0, 1), "env": ENV}
    (out / f"{name}.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(name, meta)


def sse_events(resp: requests.Response) -> list[str]:
    """The `data:` payloads of an SSE stream, in order, as sent (blank keep-alives dropped)."""
    return [line[len("data:"):].strip() for line in resp.iter_lines(decode_unicode=True)
            if line and line.startswith("data:")]


def ask(base: str, method: str, path: str, body: dict | None = None, stream: bool = False) -> dict:
    resp = requests.request(method, base + path, json=body, stream=stream, timeout=300)
    rec: dict = {"method": method, "path": path, "request": body, "status": resp.status_code,
                 "content_type": resp.headers.get("content-type")}
    if stream and resp.status_code == 200:
        rec["events"] = sse_events(resp)
    else:
        try:
            rec["body"] = resp.json()
        except ValueError:
            rec["text"] = resp.text
    return rec


PROMPT = "the server answers each request"
IDS = [1000 + 997 * i % 29000 for i in range(24)]  # within framework.core.workload.PROMPT_TOKEN_RANGE
REQUESTS = [
    ("generate_stream", "POST", "/generate",
     {"text": PROMPT, "sampling_params": {"max_new_tokens": 8, "temperature": 0, "ignore_eos": True},
      "stream": True}, True),
    # the body framework.execution.client.request.request_body sends: token ids, as its workloads make them
    ("generate_stream_input_ids", "POST", "/generate",
     {"input_ids": IDS, "stream": True,
      "sampling_params": {"max_new_tokens": 16, "temperature": 0.0, "ignore_eos": True}}, True),
    ("generate", "POST", "/generate",
     {"text": PROMPT, "sampling_params": {"max_new_tokens": 8, "temperature": 0, "ignore_eos": True}}, False),
    ("completions_stream", "POST", "/v1/completions",
     {"model": "MODEL", "prompt": PROMPT, "max_tokens": 8, "temperature": 0, "ignore_eos": True, "stream": True,
      "stream_options": {"include_usage": True, "continuous_usage_stats": True}}, True),
    ("completions", "POST", "/v1/completions",
     {"model": "MODEL", "prompt": PROMPT, "max_tokens": 8, "temperature": 0, "ignore_eos": True}, False),
    ("chat_stream", "POST", "/v1/chat/completions",
     {"model": "MODEL", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 8, "temperature": 0,
      "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}, True),
    # bad requests: what SGLang says, and with which status
    ("error_generate_no_input", "POST", "/generate", {"sampling_params": {"max_new_tokens": 4}}, False),
    ("error_generate_bad_max_new_tokens", "POST", "/generate",
     {"text": PROMPT, "sampling_params": {"max_new_tokens": -1}}, False),
    ("generate_long_prompt", "POST", "/generate",
     {"text": PROMPT * 400, "sampling_params": {"max_new_tokens": 4}}, False),
    ("error_completions_bad_temperature", "POST", "/v1/completions",
     {"model": "MODEL", "prompt": PROMPT, "max_tokens": 4, "temperature": -1}, False),
    ("error_completions_no_prompt", "POST", "/v1/completions", {"model": "MODEL", "max_tokens": 4}, False),
    ("error_chat_bad_messages", "POST", "/v1/chat/completions",
     {"model": "MODEL", "messages": "hello", "max_tokens": 4}, False),
    ("error_unknown_route", "GET", "/no_such_route", None, False),
]


def wait_ready(proc: subprocess.Popen[bytes], base: str, raw: Path, t0: float) -> list[tuple[float, int | str]]:
    """Poll /health until 200; each change of its answer during start-up, with the time it came."""
    health: list[tuple[float, int | str]] = []  # each change of /health's answer during start-up
    while True:
        if proc.poll() is not None:
            sys.exit(f"SGLang exited with {proc.returncode} during start-up; see {raw}")
        try:
            code: int | str = requests.get(base + "/health", timeout=5).status_code
        except requests.RequestException as exc:
            code = type(exc).__name__
        if not health or health[-1][1] != code:
            health.append((round(time.monotonic() - t0, 1), code))
        if code == 200:
            break
        if time.monotonic() - t0 > READY_TIMEOUT_S:
            os.killpg(proc.pid, signal.SIGKILL)
            sys.exit("not ready in time")
        time.sleep(0.5)
    return health


def crash(out: Path, model: str) -> None:
    """A token id beyond the vocabulary, sent to a ready SGLang: keep what it answered, its log and exit code."""
    scrub = Scrub(model)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    raw = out / "crash.raw.log"
    t0 = time.monotonic()
    proc = start(model, port, SERVE_FLAGS, raw)
    wait_ready(proc, base, raw, t0)
    ready_bytes = raw.stat().st_size
    body = {"input_ids": [40000, 1], "sampling_params": {"max_new_tokens": 4}}
    try:
        resp = requests.post(base + "/generate", json=body, timeout=300)
        answer: dict = {"status": resp.status_code, "text": resp.text}
    except requests.RequestException as exc:
        answer = {"exception": type(exc).__name__, "message": str(exc)}
    try:
        code = proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        code = f"still running after {STOP_TIMEOUT_S:.0f} s; killed"
    text = raw.read_bytes()
    (out / "crash_after_ready.log").write_text(scrub(text[ready_bytes:].decode(errors="replace")))
    raw.unlink()
    meta = {"argv_extra": SERVE_FLAGS, "env": ENV, "request": body, "answer": answer, "exit_code": code}
    (out / "crash_after_ready.json").write_text(scrub(json.dumps(meta, indent=1)) + "\n")
    print(json.dumps(meta))


def serve(out: Path, model: str) -> None:
    """Start SGLang, record every route the framework uses and bad requests, stop it, keep the logs."""
    scrub = Scrub(model)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    raw = out / "serve.raw.log"
    t0 = time.monotonic()
    proc = start(model, port, SERVE_FLAGS, raw)
    health = wait_ready(proc, base, raw, t0)
    ready_s = round(time.monotonic() - t0, 1)
    startup_bytes = raw.stat().st_size
    served = requests.get(base + "/v1/models", timeout=30).json()
    model_id = served["data"][0]["id"]
    rec: dict[str, dict] = {"v1_models": {"method": "GET", "path": "/v1/models", "status": 200, "body": served}}
    for path in ("/server_info", "/get_server_info", "/get_model_info", "/health", "/health_generate", "/version"):
        rec[path.strip("/")] = ask(base, "GET", path)
    for name, method, path, body, stream in REQUESTS:
        if body is not None and body.get("model") == "MODEL":
            body = {**body, "model": model_id}
        rec[name] = ask(base, method, path, body, stream)
    metrics = requests.get(base + "/metrics", timeout=30).text
    t_stop = time.monotonic()
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        exit_code = proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        exit_code = proc.wait()
    stop_s = round(time.monotonic() - t_stop, 1)
    time.sleep(2.0)
    orphans = subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True, text=True).stdout.split()
    text = raw.read_bytes()
    (out / "startup.log").write_text(scrub(text[:startup_bytes].decode(errors="replace")))
    (out / "serving_and_teardown.log").write_text(scrub(text[startup_bytes:].decode(errors="replace")))
    raw.unlink()
    (out / "metrics.txt").write_text(scrub(metrics))
    for name, value in rec.items():
        (out / "responses").mkdir(exist_ok=True)
        (out / "responses" / f"{name}.json").write_text(scrub(json.dumps(value, indent=1, sort_keys=True)) + "\n")
    meta = {"argv_extra": SERVE_FLAGS, "env": ENV, "ready_s": ready_s, "health_during_startup": health,
            "sigterm_exit_code": exit_code, "stop_s": stop_s, "orphans_after_stop": len(orphans),
            "served_model_id": scrub(model_id)}
    (out / "serve.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(json.dumps(meta))


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "failure":
        failure(sys.argv[2], Path(sys.argv[3]), sys.argv[4], sys.argv[5:])
    elif mode == "serve":
        serve(Path(sys.argv[2]), sys.argv[3])
    elif mode == "crash":
        crash(Path(sys.argv[2]), sys.argv[3])
    else:
        sys.exit(__doc__)
