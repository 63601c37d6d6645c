"""Is every reported figure on the model's clock? Client figures against the sim's own schedule.

For each concurrency, a simulated server (noise off) is launched with ``--sim-ground-truth``: one
line per chunk with the model time at which the engine scheduled it (``model_t``, model seconds
from the request's arrival). The framework's client measures the same requests over real HTTP.
For every metric the framework reports (ttft, tpot, itl, e2e, decode and output tok/s) we print
the relative bias against that model clock, median and p99 over requests, three ways:

- ``reported``: the figures the framework records (from the sim's timestamps carried in the
  stream; docs/model.md, "Timing");
- ``wall``: what a wall-clock client would have reported (wall durations x the speed-up);
- ``batch``: the bias that remains in the reported figures because the machine left the model's
  batch emptier than the workload's concurrency (wall time between a stream's requests, x the
  speed-up), from the engine's own mean batch and the model's step times; this is the number a run
  warns with and marks verdicts unreliable by.

The reported figures are also checked against ``expected_metrics`` (the planning model: the
engine's schedule replayed without a clock, servers/sim/served.py), at every concurrency. Then each
concurrency, closed loop and an open loop capped at it, runs again at speed-up 1 with the same seed
(virtual time: the figures must be the same at any speed-up; servers/sim/arrivals.py), and the
speed-up is swept to show where each bias crosses 1%.

    python benchmarks/client_fidelity.py [--speedup 20] [--concurrency 1 8 32 64] [--sweep 1 2 5 10 20 40]
                                         [--no-vs1]
    python benchmarks/client_fidelity.py --load     # the client under load (benchmarks/client_load.py)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from framework.core.spec import Workload
from framework.execution.client import run_workload
from framework.execution.launcher import ServerProcess, ServerSpec, free_port
from framework.servers.sim import model
from framework.servers.sim.args import parse_server_args
from framework.servers.sim.expected import expected_metrics
from framework.servers.sim.profile import load_profile

PROFILE = "rtx_pro_6000_tp8"
FLAGS = ["--tp-size", "8", "--mem-fraction-static", "0.85", "--cuda-graph-max-bs", "16"]  # the seed's experiment
METRICS = ("ttft_s", "tpot_s", "itl_s", "e2e_s", "decode_tok_s", "output_tok_s")


def truth_figures(model_ts: list[float], tokens: list[int]) -> dict[str, Any]:
    """The model clock's figures of one request from its chunks' model times and token counts."""
    n = sum(tokens)
    first, last = model_ts[0], model_ts[-1]
    gaps = [(b - a) / k for a, b, k in zip(model_ts, model_ts[1:], tokens[1:]) if k]
    return {"ttft_s": first, "e2e_s": last, "tpot_s": (last - first) / (n - 1), "decode_tok_s": (n - 1) / (last - first),
            "output_tok_s": n / last, "itl_s": gaps}


def client_itl(times: list[float], tokens: list[int]) -> list[float]:
    pairs = [(t, k) for t, k in zip(times, tokens) if k]
    return [(b[0] - a[0]) / b[1] for a, b in zip(pairs, pairs[1:])]


def run(concurrency: int, speedup: float, requests_n: int, workdir: Path, open_loop: bool = False) -> dict[str, Any]:
    port = free_port()
    truth = workdir / f"truth-{port}.jsonl"
    argv = [sys.executable, "-m", "framework.servers.sim", "--model-path", "m", "--port", str(port), *FLAGS,
            "--sim-speedup", str(speedup), "--sim-noise-scale", "0", "--sim-ground-truth", str(truth),
            "--random-seed", "1", "--sim-startup-s", "0"]
    rows: list[dict] = []
    by_index: dict[int, tuple] = {}
    workload = (Workload(prompt_tokens=128, output_tokens=256, request_rate=4.0 * concurrency,
                         max_concurrency=concurrency) if open_loop
                else Workload(prompt_tokens=128, output_tokens=256, concurrency=concurrency))

    def keep(i: int, unanalysed: bool, row: dict) -> None:
        if not unanalysed:
            rows.append(row)
            by_index[i] = tuple(row.get(m) for m in (*METRICS[:2], *METRICS[3:], "model_start_s"))

    with ServerProcess(ServerSpec(argv, "127.0.0.1", port, workdir / f"sim-{port}.log", ready_timeout_s=60)) as srv:
        run_workload(srv.spec.base_url, workload, requests_n=requests_n, warmup=concurrency, seed=7,
                     time_scale=speedup, on_row=keep)
    chunks: dict[str, list[dict]] = {}
    for line in truth.read_text().splitlines():
        c = json.loads(line)
        chunks.setdefault(str(c["rid"]), []).append(c)
    errs: dict[str, dict[str, list[float]]] = {"reported": {m: [] for m in METRICS}, "wall": {m: [] for m in METRICS}}
    batches = []
    for row in rows:
        gt = [c for c in chunks.get(str(row["server_request_id"]), []) if c["tokens"] > 0]
        if not row["ok"] or len(gt) < 2:
            continue
        t = truth_figures([c["model_t"] for c in gt], [c["tokens"] for c in gt])
        batches.append(row.get("sim_mean_batch") or 0.0)
        wall_times = [x * speedup for x in row["chunk_times_s"]]
        reported = {**{m: row[m] for m in METRICS if m != "itl_s"},
                    "itl_s": client_itl(row["chunk_model_times_s"], row["chunk_model_tokens"]) if row.get("chunk_model_times_s")
                    else client_itl(wall_times, row["chunk_tokens"])}
        wall = {**{m: row.get(f"wall_{m}", row[m]) for m in METRICS if m != "itl_s"},
                "itl_s": client_itl(wall_times, row["chunk_tokens"])}
        for kind, figs in (("reported", reported), ("wall", wall)):
            for m in METRICS:
                if m == "itl_s":
                    errs[kind][m] += [a / b - 1 for a, b in zip(figs[m], t[m]) if b > 0]
                elif figs[m] is not None:  # a wall-clock span of 0 (all tokens in one read) has no rate
                    errs[kind][m].append(figs[m] / t[m] - 1)
    args = parse_server_args(["--model-path", "m", *FLAGS, "--sim-profile", PROFILE])
    batch_bias = (model.batch_bias(load_profile(PROFILE), args, concurrency, statistics.median(batches))
                  if batches and concurrency > 1 else 0.0)
    expected = None
    ok = [r for r in rows if r["ok"]]
    if not open_loop and ok:  # the planning model's means against the launch's (noise off: equal)
        e = expected_metrics(PROFILE, FLAGS + ["--sim-noise-scale", "0"], 128, 256, concurrency,
                                   requests=requests_n, warmup=concurrency)
        expected = {m: statistics.mean(r[m] for r in ok) / e[m] - 1 for m in ("ttft_s", "e2e_s", "decode_tok_s")}
    return {"errs": errs, "batch_bias": batch_bias, "n": len(batches), "by_index": by_index,
            "mean_batch": statistics.median(batches) if batches else None, "expected": expected}


def vs_speedup_1(fast: dict[int, tuple], slow: dict[int, tuple]) -> tuple[int, int, float]:
    """(requests compared, requests whose every figure is identical, largest relative difference)."""
    common = sorted(set(fast) & set(slow))
    same = sum(1 for i in common if fast[i] == slow[i])
    worst = max((abs(a / b - 1) for i in common for a, b in zip(fast[i], slow[i], strict=False)
                 if isinstance(a, float) and isinstance(b, float) and b), default=0.0)
    return len(common), same, worst


def q(values: list[float], p: float) -> float:
    v = sorted(abs(x) for x in values)
    return v[min(len(v) - 1, int(round(p * (len(v) - 1))))] if v else float("nan")


def signed_median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--speedup", type=float, default=20.0, help="the default settings' speed-up (backend.speedup)")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32, 64])
    ap.add_argument("--sweep", type=float, nargs="*", default=[1, 2, 5, 10, 20, 40])
    ap.add_argument("--no-vs1", dest="vs1", action="store_false",
                    help="leave out the same-seed comparison against speed-up 1 (real time: the slow part)")
    ap.add_argument("--load", action="store_true",
                    help="instead: concurrency 1-256 and open-loop rates, the framework's client beside a "
                         "bench_serving-style reference and the previous thread client (benchmarks/client_load.py)")
    ap.add_argument("--requests", type=int, default=16, help="with --load: requests per point")
    ap.add_argument("--load-concurrency", type=int, nargs="*", default=[1, 16, 64, 256])
    ap.add_argument("--load-rates", type=float, nargs="*", default=[4, 16, 32, 64])
    ap.add_argument("--load-clients", nargs="+", default=["async", "reference", "threads"])
    args = ap.parse_args()
    if args.load:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from client_load import main_load

        with tempfile.TemporaryDirectory() as tmp:
            main_load(args.speedup, args.load_concurrency, args.load_rates, args.load_clients, args.requests,
                      Path(tmp))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        print(f"## Bias against the model clock at speed-up {args.speedup:g} (median / p99 over requests; "
              "itl over tokens)\n")
        print("| concurrency | requests | metric | reported median | reported p99 | wall median | wall p99 |")
        print("|---|---|---|---|---|---|---|")
        batch_rows = []
        for conc in args.concurrency:
            r = run(conc, args.speedup, max(16, 2 * conc), Path(tmp))
            for m in METRICS:
                rep, wall = r["errs"]["reported"][m], r["errs"]["wall"][m]
                print(f"| {conc} | {r['n']} | {m} | {signed_median(rep):+.3%} | {q(rep, 0.99):.3%} | "
                      f"{signed_median(wall):+.2%} | {q(wall, 0.99):.2%} |", flush=True)
            batch_rows.append((conc, r["mean_batch"], r["batch_bias"]))
            if r["expected"]:
                print(f"| {conc} | {r['n']} | vs expected_metrics | " + ", ".join(
                    f"{k} {v:+.3%}" for k, v in r["expected"].items()) + " | | | |", flush=True)
        if args.vs1:
            print(f"\n## Same seed at speed-up {args.speedup:g} against speed-up 1 (every reported figure per request: "
                  "ttft, tpot, e2e, decode and output tok/s, model send time)\n")
            print("| loop | concurrency | requests | identical | largest relative difference |")
            print("|---|---|---|---|---|")
            for conc in args.concurrency:
                for open_loop in (False, True):
                    n = max(16, 2 * conc)
                    fast = run(conc, args.speedup, n, Path(tmp), open_loop)["by_index"]
                    slow = run(conc, 1.0, n, Path(tmp), open_loop)["by_index"]
                    k, same, worst = vs_speedup_1(fast, slow)
                    print(f"| {'open (cap)' if open_loop else 'closed'} | {conc} | {k} | {same} | {worst:.2e} |",
                          flush=True)
        print("\n| concurrency | model's mean decode batch | batch bias (in the reported figures) |")
        print("|---|---|---|")
        for conc, mb, bb in batch_rows:
            print(f"| {conc} | {mb:.2f} | {bb:+.2%} |" if mb is not None else f"| {conc} | - | - |")
        if args.sweep:
            print("\n## Speed-up sweep: batch bias (reported figures) and wall-clock TTFT / TPOT median bias\n")
            print("| concurrency | " + " | ".join(f"x{s:g}" for s in args.sweep) + " | batch bias > 1% from |")
            print("|---|" + "---|" * (len(args.sweep) + 1))
            for conc in args.concurrency:
                cells, crossing = [], None
                for s in args.sweep:
                    r = run(conc, s, max(4, conc), Path(tmp))
                    wt = signed_median(r["errs"]["wall"]["ttft_s"])
                    wp = signed_median(r["errs"]["wall"]["tpot_s"])
                    cells.append(f"{r['batch_bias']:+.2%} (wall ttft {wt:+.0%}, tpot {wp:+.1%})")
                    if crossing is None and abs(r["batch_bias"]) > 0.01:
                        crossing = s
                print(f"| {conc} | " + " | ".join(cells) + f" | {'x%g' % crossing if crossing else 'none in sweep'} |",
                      flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
