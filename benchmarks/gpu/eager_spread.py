"""How much the GPU server's eager decode step moves between fresh processes, and whether CPU pinning holds it.

The twin's validation on one H200 (issue 35) found eager (graphs off) TPOT 12.5-19.5 ms from launch to launch
with no pattern in the configuration, and graphs-on TPOT within a few percent. This times the executor's step
directly (no HTTP, no scheduler): one process with CUDA graphs, then three rounds of three fresh eager
processes (unpinned, pinned to one core with ``taskset -c 3``, pinned to two with ``taskset -c 4,5``). Each
process builds the executor of benchmarks/twin/gpu_twin.yaml's server (Llama-1B shape, random bf16 weights,
--torch-compile-mode none), takes 40 warm-up steps and times 200 at batch 1 and at batch 4 (perf_counter
around ``Executor.step``, which returns the tokens on the host, so each step is synchronized). One JSON line
per process and batch: median, p10 and p90 ms per step, the core it last ran on, torch's CPU threads, and the
GPU's SM/memory clocks and power right after it (nvidia-smi).

    python benchmarks/gpu/eager_spread.py > eager_spread.jsonl     # from a clone's root, one CUDA GPU; ~140 s
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# A child's start (argv: mode, the clone's root): the GPU server's executor as benchmarks/twin/gpu_twin.yaml
# builds it, eager unless the mode is "graphs" (eager_host.py starts its children with it too)
SETUP = r'''
import gc, json, statistics, sys, time
sys.path.insert(0, sys.argv[2])
from framework.servers.gpu.comm import no_multicast_env
no_multicast_env()
import torch
from framework.servers.gpu.args import parse_server_args
from framework.servers.gpu.__main__ import build_executor
graphs = sys.argv[1] == "graphs"
argv = ["--model-path", "llama-1b", "--context-length", "512", "--max-running-requests", "16",
        "--cuda-graph-max-bs", "16", "--torch-compile-mode", "none"] + ([] if graphs else ["--disable-cuda-graph"])
'''

CHILD = SETUP + r'''
t0 = time.perf_counter()
ex = build_executor(parse_server_args(argv), 0, 0)
built = time.perf_counter() - t0
ex.prefill(0, list(range(1, 33)))
for B in (1, 4):
    for i in range(40):
        ex.step([1] * B, [40 + i] * B)
    ts = []
    for i in range(200):
        a = time.perf_counter()
        ex.step([1] * B, [80 + i] * B)
        ts.append(time.perf_counter() - a)
    ts.sort()
    print(json.dumps({"graphs": graphs, "B": B, "median_ms": statistics.median(ts) * 1e3, "p10": ts[20] * 1e3,
                      "p90": ts[180] * 1e3, "cpu": open("/proc/self/stat").read().split()[38],
                      "threads": torch.get_num_threads(), "built_s": built}), flush=True)
'''


def run(tag: str, prefix: list[str], mode: str) -> None:
    t = time.time()
    p = subprocess.run([*prefix, sys.executable, "-c", CHILD, mode, str(ROOT)], capture_output=True, text=True,
                       timeout=120)
    clocks = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.mem,power.draw", "--format=csv,noheader"],
                            capture_output=True, text=True).stdout.strip()
    for line in p.stdout.splitlines():
        if line.startswith("{"):
            print(json.dumps({**json.loads(line), "tag": tag, "clk": clocks, "wall": round(time.time() - t, 1)}),
                  flush=True)
    if p.returncode:
        print(json.dumps({"tag": tag, "rc": p.returncode, "stderr": p.stderr[-1500:]}), flush=True)


def main() -> int:
    run("graphs", [], "graphs")
    for _ in range(3):
        run("eager", [], "eager")
        run("eager_pin1", ["taskset", "-c", "3"], "eager")
        run("eager_pin2", ["taskset", "-c", "4,5"], "eager")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
