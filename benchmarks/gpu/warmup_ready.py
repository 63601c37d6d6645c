"""The eager arm's first requests on a cold compile cache: ready only when its compiled pieces are built (issue 32).

    python benchmarks/gpu/warmup_ready.py --out DIR [--server-args ...]    (on a CUDA machine)

Starts ``python -m framework.servers.gpu`` as ``experiments/gpu_llama1b_tp1.yaml`` does plus
``--disable-cuda-graph`` (the eager arm of ``hypotheses/gpu_cuda_graphs.yaml``) on cold Inductor and Triton
caches (fresh ones, or those the environment names, said to be cold when empty), and times: start to
``/health`` 200, the start-up's compile warm-up (from the server's log), then three batch-1 requests one
after another (128 prompt tokens, 64 output tokens) and eight at once. Before the fix each first request
took about 100 s (the compile ran inside it, against a 120 s request timeout); after it, every request
takes what a warm step takes. Writes ``DIR/warmup_ready.json`` and the server's log.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import requests

SERVER = ["--model-path", "llama-1b", "--context-length", "512", "--max-running-requests", "64",
          "--cuda-graph-max-bs", "64", "--random-seed", "0", "--disable-cuda-graph"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _generate(url: str, seed: int) -> float:
    ids = [(seed * 7919 + i * 104729) % 32000 for i in range(128)]
    t0 = time.perf_counter()
    r = requests.post(f"{url}/generate", json={"input_ids": ids, "sampling_params": {
        "max_new_tokens": 64, "ignore_eos": True, "temperature": 0.0}}, timeout=120)
    r.raise_for_status()
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(prog="python benchmarks/gpu/warmup_ready.py")
    p.add_argument("--out", required=True)
    p.add_argument("--ready-timeout-s", type=float, default=400.0)
    p.add_argument("--server-args", nargs="*", default=[])
    opts = p.parse_args()
    out_dir = Path(opts.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    # the caches named in the environment (so a later benchmark can reuse what this compiled), else fresh ones
    fresh = tempfile.mkdtemp(prefix="cold-cache-")
    env = {"TORCHINDUCTOR_CACHE_DIR": f"{fresh}/inductor", "TRITON_CACHE_DIR": f"{fresh}/triton", **os.environ}
    cold = all(not Path(env[k]).exists() or not any(Path(env[k]).iterdir())
               for k in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"))
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "framework.servers.gpu", *SERVER, "--port", str(port), *opts.server_args]
    log_path = out_dir / "warmup_ready_server.log"
    res: dict[str, Any] = {"cmd": cmd[1:], "cold_cache": cold}
    t0 = time.perf_counter()
    with open(log_path, "w") as log:
        server = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            while True:
                if server.poll() is not None:
                    raise SystemExit(f"server exited {server.returncode}; see {log_path}")
                if time.perf_counter() - t0 > opts.ready_timeout_s:
                    raise SystemExit(f"not ready after {opts.ready_timeout_s} s; see {log_path}")
                try:
                    if requests.get(f"{url}/health", timeout=1).status_code == 200:
                        break
                except requests.RequestException:
                    pass
                time.sleep(0.25)
            res["ready_s"] = time.perf_counter() - t0
            res["batch1_request_s"] = [_generate(url, i) for i in range(3)]
            with ThreadPoolExecutor(8) as pool:
                res["conc8_request_s"] = list(pool.map(lambda i: _generate(url, 100 + i), range(8)))
        finally:
            server.terminate()
            try:
                server.wait(10)
            except subprocess.TimeoutExpired:
                server.kill()
    text = log_path.read_text()
    warm = re.search(r"Compile warm-up end\. Time elapsed: ([0-9.]+) s", text)
    res["compile_warmup_s"] = float(warm.group(1)) if warm else None
    res["max_request_s"] = max(res["batch1_request_s"] + res["conc8_request_s"])
    res["device"] = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                                   capture_output=True, text=True).stdout.strip()
    print(json.dumps(res, indent=1))
    (out_dir / "warmup_ready.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
