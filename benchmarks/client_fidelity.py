"""How faithfully does the HTTP client time the server? Client figures against the sim's ground truth.

The simulator writes, for every chunk, the wall time at which it handed the chunk to the HTTP
layer (`--sim-ground-truth`). The client times the same chunks on arrival. For each request we
compare TPOT = (t_last - t_first) / (completion_tokens - 1) measured both ways; both are
differences of one clock each, so no clock alignment is needed. The remaining error is what the
HTTP path, the event loops and the client's parsing add.

    python benchmarks/client_fidelity.py [--speedup 1] [--requests 24] [--concurrency 1 16]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from framework.execution.client import run_workload
from framework.execution.launcher import ServerProcess, ServerSpec, free_port
from framework.spec import Workload

SEED_FLAGS = {
    "baseline": [],
    "eagle3+fusion": ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3",
                      "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
                      "--enable-flashinfer-allreduce-fusion"],
}


def measure(flags: list[str], concurrency: int, requests_n: int, speedup: float, workdir: Path) -> list[float]:
    port = free_port()
    truth = workdir / f"truth-{port}.jsonl"
    argv = [sys.executable, "-m", "framework.sim", "--model-path", "m", "--tp-size", "8", "--port", str(port),
            "--sim-speedup", str(speedup), "--sim-ground-truth", str(truth), "--random-seed", "1", *flags]
    rows: list[dict] = []
    workload = Workload(prompt_tokens=128, output_tokens=256, concurrency=concurrency)
    with ServerProcess(ServerSpec(argv, "127.0.0.1", port, workdir / f"sim-{port}.log", ready_timeout_s=60)) as srv:
        run_workload(srv.spec.base_url, workload, requests_n=requests_n, warmup=concurrency, seed=7,
                     time_scale=speedup, on_row=lambda i, w, row: None if w else rows.append(row))
    chunks: dict[str, list[dict]] = {}
    for line in truth.read_text().splitlines():
        c = json.loads(line)
        chunks.setdefault(str(c["rid"]), []).append(c)
    errors = []
    for row in rows:
        gt = [c for c in chunks.get(str(row["server_request_id"]), []) if c["tokens"] > 0]
        if not row["ok"] or len(gt) < 2 or row["tpot_s"] is None:
            continue
        n = sum(c["tokens"] for c in gt)
        gt_tpot = (gt[-1]["t_wall"] - gt[0]["t_wall"]) * speedup / (n - 1)
        errors.append(row["tpot_s"] / gt_tpot - 1.0)
    return errors


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--speedup", type=float, nargs="+", default=[1.0, 20.0])
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--load", action="store_true",
                    help="instead: concurrency 1-256 and open-loop rates, the framework's client beside a "
                         "bench_serving-style reference and the previous thread client (benchmarks/client_load.py)")
    ap.add_argument("--load-concurrency", type=int, nargs="+", default=[1, 16, 64, 256])
    ap.add_argument("--load-rates", type=float, nargs="+", default=[2, 8, 16, 32])
    ap.add_argument("--load-clients", nargs="+", default=["async", "reference", "threads"])
    args = ap.parse_args()
    if args.load:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from client_load import main_load

        with tempfile.TemporaryDirectory() as tmp:
            main_load(args.speedup[0], args.load_concurrency, args.load_rates, args.load_clients, args.requests,
                      Path(tmp))
        return 0
    print(f"{'config':<15} {'speedup':>7} {'conc':>4} {'n':>4} {'median |err|':>13} {'p90 |err|':>10} {'median err':>11}")
    with tempfile.TemporaryDirectory() as tmp:
        for speedup in args.speedup:
            for name, flags in SEED_FLAGS.items():
                for conc in args.concurrency:
                    n = max(args.requests, conc)
                    errs = measure(flags, conc, n, speedup, Path(tmp))
                    abs_errs = sorted(abs(e) for e in errs)
                    p90 = abs_errs[int(0.9 * (len(abs_errs) - 1))] if abs_errs else float("nan")
                    print(f"{name:<15} {speedup:>7g} {conc:>4} {len(errs):>4} {statistics.median(abs_errs):>12.3%} "
                          f"{p90:>10.3%} {statistics.median(errs):>+11.3%}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
