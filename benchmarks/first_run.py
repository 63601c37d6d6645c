"""The first run a new user makes: how often `python -m framework run hypothesis=eagle3_allreduce` gives the seed's answer.

Runs the main command, exactly as the README gives it (default design, sim backend, speed-up 20),
once per recorded seed (`design.seed=S`, S = 1..N: the seed drives the launch order and the
simulator's noise draws), one run after another on this machine as it is (its load is printed), and
counts the runs in which all three predictions came out supported. Prints each run as it ends, then
the count with its Clopper-Pearson 95% interval, the mean launches per condition and the mean wall
time.

    python benchmarks/first_run.py --runs 100     # the README's figure (about 100 minutes on 2 cores)
    python benchmarks/first_run.py --runs 10      # a smaller look

Nothing is chosen by outcome: the seeds are 1..N, fixed before the first run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scipy import stats

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--first-seed", type=int, default=1)
    args = ap.parse_args(argv)
    seeds = list(range(args.first_seed, args.first_seed + args.runs))
    print(f"main command x {len(seeds)}: python -m framework run hypothesis=eagle3_allreduce design.seed=S, "
          f"S = {seeds[0]}..{seeds[-1]}; load average at start {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores",
          flush=True)
    supported, launches, walls = 0, [], []
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with tempfile.TemporaryDirectory() as tmp:
        for i, seed in enumerate(seeds, 1):
            run_dir = Path(tmp) / f"run-{seed}"
            t0 = time.time()
            out = subprocess.run([sys.executable, "-m", "framework", "run", "hypothesis=eagle3_allreduce",
                                  f"design.seed={seed}", f"hydra.run.dir={run_dir}", f"ledger={Path(tmp) / 'v.jsonl'}"],
                                 cwd=tmp, env=env, capture_output=True, text=True, timeout=1800)
            wall = time.time() - t0
            try:
                rec = json.loads((run_dir / "verdict.json").read_text())
            except (OSError, ValueError):
                print(f"  seed {seed}: no verdict (exit {out.returncode}): {out.stderr[-300:]}", flush=True)
                walls.append(wall)
                continue
            n = max(c["launches"]["ok"] + c["launches"]["failed"] for c in rec["conditions"])
            ok = rec["verdict"] == "supported"
            supported += ok
            launches.append(n)
            walls.append(wall)
            preds = ", ".join(f"{p['id']} {p['verdict']}" for p in rec["predictions"])
            print(f"  seed {seed}: {rec['verdict']:12s} {n:2d} launches/condition {wall:5.0f} s  "
                  f"load {os.getloadavg()[0]:.1f}  ({preds})  [{supported}/{i}]", flush=True)
    n_runs = len(seeds)
    lo = stats.beta.ppf(0.025, supported, n_runs - supported + 1) if supported else 0.0
    hi = stats.beta.ppf(0.975, supported + 1, n_runs - supported) if supported < n_runs else 1.0
    print(f"\nall three supported in {supported}/{n_runs} runs (Clopper-Pearson 95% [{lo:.3f}, {hi:.3f}]); "
          f"mean launches/condition {sum(launches) / max(1, len(launches)):.2f}; mean wall time "
          f"{sum(walls) / max(1, len(walls)):.0f} s; load average at the end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
