"""How the load client scales with worker processes (`client.workers`), against a server with a known schedule.

Starts the known-schedule streaming server (framework.servers.schedule: first token after 20 ms, then one
every `--interval-ms`, each write's time in its truth log) pinned to its own cores, runs the framework's
client (framework.execution.client.run_workload, closed loop) pinned to the others over a ladder of
streams x workers, and prints one table: offered and achieved tok/s (the client's own figures), the
median and worst-launch TPOT error against the server's truth log (per request: the client's TPOT over
the server's first-to-last write span / (tokens - 1)), the client's CPU seconds per 1k tokens (parent +
workers), and whether the client's self-check called itself the bottleneck.

    python benchmarks/client_workers.py [--streams 64,128,256] [--workers 1,2,4,8] [--interval-ms 2]
        [--rounds 3] [--server-cores 0] [--client-cores 1-15] [--json OUT.json] [--budget-s 250]

Every cell is a fresh plan with the same seed; cells run in order and the table is printed as they end
(and written to --json after each), so a run cut by --budget-s still reports what it measured.
docs/results/client_workers.md keeps the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def cores(spec: str) -> set[int]:
    out: set[int] = set()
    for part in spec.split(","):
        a, _, b = part.partition("-")
        out |= set(range(int(a), int(b or a) + 1))
    return out


def cpu_s() -> float:
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def truth(lines: list[str]) -> dict[int, float]:
    """Per plan index (the loop header's seq): the server's own TPOT, first to last token write."""
    out = {}
    for line in lines:
        r = json.loads(line)
        w = r.get("writes") or []
        if not r.get("cancelled") and len(w) >= 2:
            out[int(r["seq"])] = (w[-1] - w[0]) / (len(w) - 1)
    return out


def cell(url: str, log: Path, streams: int, workers: int, rounds: int, tokens: int) -> dict:
    from framework.core.workload import Workload
    from framework.execution.client import run_workload

    rows: list[dict] = []
    w = Workload(concurrency=streams, prompt_tokens=16, output_tokens=tokens, endpoint="completions")
    before = log.read_text().splitlines() if log.exists() else []
    c0, t0 = cpu_s(), time.perf_counter()
    out = run_workload(url, w, requests_n=streams * rounds, warmup=streams, seed=23, protocol="openai",
                       on_row=lambda i, unanalysed, row: rows.append({**row, "index": i}), workers=workers,
                       model="schedule")
    wall, cpu = time.perf_counter() - t0, cpu_s() - c0
    time.sleep(0.3)  # the server's last log lines
    new = log.read_text().splitlines()[len(before):]
    true_tpot = truth(new)
    measured = [r for r in rows if r.get("phase") == "measured" and r["ok"]]
    errors = [r["tpot_s"] / true_tpot[r["index"]] - 1 for r in measured
              if r.get("tpot_s") and r.get("index") in true_tpot]
    t_start = min(r["start_s"] for r in measured)
    t_end = max(r["start_s"] + r["e2e_s"] for r in measured)
    tokens_all = sum(r["completion_tokens"] for r in measured)
    client = out["client"]
    return {"streams": streams, "workers": client.get("workers", workers), "measured": len(measured),
            "lost": sum(not r["ok"] for r in rows if r.get("phase") == "measured"),
            "achieved_tok_s": tokens_all / (t_end - t_start), "tpot_err_median": statistics.median(errors),
            "tpot_err_p90": sorted(errors)[int(0.9 * (len(errors) - 1))], "matched": len(errors),
            "cpu_s_per_1k_tok": 1e3 * cpu / max(1, sum(r["completion_tokens"] for r in rows)),
            "wall_s": wall, "bottleneck": client.get("bottleneck"), "reasons": client.get("reasons")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--streams", default="64,128,256")
    ap.add_argument("--workers", default="1,2,4,8")
    ap.add_argument("--interval-ms", type=float, default=2.0)
    ap.add_argument("--first-token-ms", type=float, default=20.0)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--server-cores", default="0")
    ap.add_argument("--client-cores", default=None, help="default: every core the server does not take")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--budget-s", type=float, default=1e9, help="start no cell after this many seconds")
    args = ap.parse_args()
    from framework.execution.launcher import ServerProcess, ServerSpec, free_port

    mine = os.sched_getaffinity(0)
    server_cores = cores(args.server_cores) & mine
    client_cores = cores(args.client_cores) if args.client_cores else mine - server_cores
    tmp = Path(tempfile.mkdtemp(prefix="client_workers_"))
    log = tmp / "truth.jsonl"
    port = free_port()
    flags = ["--port", str(port), "--first-token-ms", str(args.first_token_ms), "--interval-ms", str(args.interval_ms),
             "--tokens", str(args.tokens), "--truth-log", str(log)]
    pinned = (f"import os, runpy, sys; os.sched_setaffinity(0, {sorted(server_cores)!r}); "
              f"sys.argv = ['schedule', *{flags!r}]; "
              "runpy.run_module('framework.servers.schedule', run_name='__main__')")
    argv = [sys.executable, "-c", pinned]  # pinned to its cores (no taskset needed)
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    os.sched_setaffinity(0, client_cores)  # the parent and (inherited) every worker
    t_begin = time.monotonic()
    results = []
    print(f"server cores {sorted(server_cores)}, client cores {sorted(client_cores)} ({len(client_cores)}), "
          f"schedule {args.first_token_ms:g} ms + {args.tokens - 1} x {args.interval_ms:g} ms", flush=True)
    print(f"{'streams':>7} {'offered':>8} {'workers':>7} {'achieved':>9} {'TPOT err p50':>12} {'p90':>7} "
          f"{'CPU s/1k tok':>12} {'lost':>4} bottleneck", flush=True)
    with ServerProcess(ServerSpec(argv, "127.0.0.1", port, tmp / "server.log", env=env, ready_timeout_s=60)) as srv:
        for streams in [int(x) for x in args.streams.split(",")]:
            offered = streams / (args.interval_ms / 1e3)
            for workers in [int(x) for x in args.workers.split(",")]:
                if time.monotonic() - t_begin > args.budget_s:
                    print(f"budget of {args.budget_s:g} s spent: stopped", flush=True)
                    break
                r = {**cell(srv.spec.base_url, log, streams, workers, args.rounds, args.tokens),
                     "offered_tok_s": offered, "interval_ms": args.interval_ms}
                results.append(r)
                print(f"{streams:>7} {offered / 1e3:>7.1f}k {r['workers']:>7} {r['achieved_tok_s'] / 1e3:>8.1f}k "
                      f"{r['tpot_err_median']:>+12.2%} {r['tpot_err_p90']:>+7.2%} {r['cpu_s_per_1k_tok']:>12.3f} "
                      f"{r['lost']:>4} {r['bottleneck']}", flush=True)
                if args.json:
                    args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)},
                                                     "cores": len(mine), "results": results}, indent=1))


if __name__ == "__main__":
    main()
