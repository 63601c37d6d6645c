"""Whether the GPU server's eager step moves with the host CPU's own speed (issue 35's eager spread).

`eager_spread.py` found the eager decode step at one of two speeds (about 10.5 or 18 ms at batch 1), between
processes and within one, pinned or not, at a constant SM clock. This asks what moves with it. In fresh eager
processes (benchmarks/twin/gpu_twin.yaml's executor, --disable-cuda-graph), each of 400 rounds times, one after
the other: one eager step at batch 1 (synchronized: the step returns the tokens on the host); a pure-Python
loop with no CUDA in it (``sum(range(N))``); 400 tiny CUDA launches (``x.add_(1)`` on a 16-element tensor, then
one synchronize): the host's launch path without the model; and the host's steal time over the round
(``/proc/stat``). If the Python loop and the tiny launches switch speed with the step, the step's two speeds are
the host CPU's (a VM's neighbours or its frequency), which no server setting holds; if they stay flat while the
step switches, the cause is in the step (the driver, the GPU) and is worth chasing. One process runs as the
server does; one with Python's GC frozen and disabled and torch's CPU threads at 1 (the obvious in-process
suspects). Prints one JSON line per round and process, then a summary line per process: each series' median,
p10, p90, and the Spearman correlation of the step with each (scipy).

    python benchmarks/gpu/eager_host.py > eager_host.jsonl      # from a clone's root, one CUDA GPU; ~60 s
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from eager_spread import SETUP  # the same executor, started the same way (this directory is on sys.path)

ROOT = Path(__file__).resolve().parents[2]

CHILD = SETUP + r'''
quiet = sys.argv[1] == "quiet"
if quiet:
    torch.set_num_threads(1)
ex = build_executor(parse_server_args(argv), 0, 0)
ex.prefill(0, list(range(1, 33)))
x = torch.zeros(16, device="cuda")
def steal():
    f = open("/proc/stat").readline().split()
    return int(f[8]) if len(f) > 8 else 0
for i in range(40):
    ex.step([1], [40 + i])
if quiet:
    gc.collect(); gc.freeze(); gc.disable()
for i in range(400):
    s0 = steal()
    a = time.perf_counter(); ex.step([1], [80 + (i % 300)]); b = time.perf_counter()
    sum(range(200000)); c = time.perf_counter()
    for _ in range(400):
        x.add_(1)
    torch.cuda.synchronize(); d = time.perf_counter()
    print(json.dumps({"round": i, "step_ms": (b - a) * 1e3, "python_ms": (c - b) * 1e3, "launch_ms": (d - c) * 1e3,
                      "steal_ticks": steal() - s0, "cpu": int(open("/proc/self/stat").read().split()[38])}),
          flush=True)
'''


def main() -> int:
    from scipy import stats

    for mode in ("server", "quiet", "server"):
        p = subprocess.run([sys.executable, "-c", CHILD, mode, str(ROOT)], capture_output=True, text=True, timeout=150)
        rows = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
        for r in rows:
            print(json.dumps({"mode": mode, **r}), flush=True)
        if p.returncode or not rows:
            print(json.dumps({"mode": mode, "rc": p.returncode, "stderr": p.stderr[-1500:]}), flush=True)
            continue
        summary: dict[str, object] = {"mode": mode, "summary": True, "rounds": len(rows),
                                      "steal_ticks": sum(r["steal_ticks"] for r in rows),
                                      "cpus": sorted({r["cpu"] for r in rows})}
        for key in ("step_ms", "python_ms", "launch_ms"):
            v = sorted(r[key] for r in rows)
            summary[key] = {"median": v[len(v) // 2], "p10": v[len(v) // 10], "p90": v[len(v) * 9 // 10]}
            if key != "step_ms":
                rho = stats.spearmanr([r["step_ms"] for r in rows], [r[key] for r in rows])
                summary[f"spearman_step_{key}"] = round(float(rho.statistic), 3)
        print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
