"""Does the client keep up under load? Timing error at concurrency 1-256 and open-loop rates, three clients.

Run through `python benchmarks/client_fidelity.py --load` (this module is its load section). For
each load the simulator runs with `--sim-ground-truth` (the wall time at which it handed every chunk
to HTTP, and the chunk's model time) and one of three clients measures it:

- `async`: the framework's client (framework.execution.client: one asyncio loop, aiohttp, a shared
  keep-alive pool);
- `reference`: a client in the style of SGLang's bench_serving (aiohttp, one ClientSession per
  request, line-by-line reads, closed loop by a semaphore, open loop by sleeping between sends);
- `threads`: the framework's previous client (one thread and one `requests` session per stream).

Per measured request, the TPOT error against the hand-off (client TPOT / TPOT between the same first
and last chunks as the sim handed them to HTTP - 1: what the HTTP path and the client add), the same
from the first to the second-to-last chunk (at high concurrency the sim's final chunk of a stream
reaches the socket late for every client, which is the server's, not the client's), and against the
model clock (/ TPOT from the chunks' model times - 1: everything, the sim's own lateness included).
Open loop: also the client's send lateness (actual - scheduled send, wall ms).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from framework.execution.client import request_body, run_workload
from framework.execution.launcher import ServerProcess, ServerSpec, free_port
from framework.core.workload import Workload, make_plan

PROMPT, OUTPUT = 64, 64


# --------------------------------------------------------------------------- reference clients


def _new_stream() -> dict[str, Any]:
    return {"times": [], "tokens": [], "rid": None, "seen": 0}


def _record(stream: dict[str, Any], now: float, data: bytes) -> None:
    """One /generate event into `stream`: its time and new tokens (`completion_tokens` is cumulative)."""
    meta = json.loads(data).get("meta_info") or {}
    count = int(meta.get("completion_tokens", stream["seen"]))
    stream["rid"] = meta.get("id", stream["rid"])
    stream["times"].append(now)
    stream["tokens"].append(count - stream["seen"])
    stream["seen"] = count


async def _bench_serving_request(url: str, body: dict, t_origin: float) -> dict:
    """bench_serving's sglang request function, reduced: a new session per request, a line per event."""
    import aiohttp

    stream = _new_stream()
    timeout = aiohttp.ClientTimeout(total=6 * 60 * 60)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        st, st_abs = time.perf_counter(), time.time()
        async with session.post(url + "/generate", json=body) as resp:
            async for chunk_bytes in resp.content:
                chunk_bytes = chunk_bytes.strip()
                if not chunk_bytes:
                    continue
                now = time.perf_counter() - st
                data = chunk_bytes.removeprefix(b"data:").strip()
                if data == b"[DONE]":
                    continue
                _record(stream, now, data)
    return {"times": stream["times"], "tokens": stream["tokens"], "rid": stream["rid"], "start": st - t_origin,
            "start_abs": st_abs}


def reference_client(url: str, bodies: list[dict], concurrency: int | None, send_at: list[float] | None,
                     time_scale: float) -> tuple[list[dict], list[float]]:
    """All requests as tasks, a semaphore for concurrency; open loop: sleep until each send (bench_serving)."""
    async def main() -> tuple[list[dict], list[float]]:
        sem = asyncio.Semaphore(concurrency) if concurrency else None
        late: list[float] = []
        t_origin = time.perf_counter()

        async def limited(body: dict) -> dict:
            if sem is None:
                return await _bench_serving_request(url, body, t_origin)
            async with sem:
                return await _bench_serving_request(url, body, t_origin)

        tasks = []
        for i, body in enumerate(bodies):
            if send_at is not None:
                target = t_origin + send_at[i] / time_scale
                await asyncio.sleep(max(0.0, target - time.perf_counter()))
                late.append(time.perf_counter() - target)
            tasks.append(asyncio.ensure_future(limited(body)))
        return list(await asyncio.gather(*tasks)), late

    return asyncio.run(main())


def thread_client(url: str, bodies: list[dict], concurrency: int) -> list[dict]:
    """The previous client: one thread and one `requests` session per stream, chunked reads."""
    import requests

    out: list[dict] = []
    it = iter(enumerate(bodies))
    lock = threading.Lock()

    def worker() -> None:
        with requests.Session() as s:
            while True:
                with lock:
                    item = next(it, None)
                if item is None:
                    return
                index, body = item
                stream, buf = _new_stream(), b""
                t0 = time.perf_counter()
                with s.post(url + "/generate", json=body, stream=True, timeout=(10, 600)) as resp:
                    for piece in resp.iter_content(chunk_size=None):
                        now = time.perf_counter() - t0
                        buf += piece
                        while b"\n\n" in buf:
                            event, buf = buf.split(b"\n\n", 1)
                            data = event.strip().removeprefix(b"data:").strip()
                            if not data or data == b"[DONE]":
                                continue
                            _record(stream, now, data)
                with lock:
                    out.append({"times": stream["times"], "tokens": stream["tokens"], "rid": stream["rid"],
                                "index": index})

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


# --------------------------------------------------------------------------- errors against the ground truth


def _tpot(times: list[float], tokens: list[int]) -> float | None:
    arr = [(t, n) for t, n in zip(times, tokens) if n > 0]
    total = sum(tokens)
    if len(arr) < 2 or total < 2:
        return None
    return (arr[-1][0] - arr[0][0]) / (total - 1)


def errors(measured: list[dict], truth: dict[str, list[dict]],
           speedup: float) -> tuple[list[float], list[float], list[float]]:
    """Per request, on TPOT: (error vs the sim's HTTP hand-off, vs the model clock, and vs the hand-off
    over the first to the second-to-last chunk: the client without the sim's final-chunk delay)."""
    handoff, model, inner = [], [], []
    for m in measured:
        gt = [c for c in truth.get(str(m["rid"]), []) if c["tokens"] > 0]
        arr = [(t, n) for t, n in zip(m["times"], m["tokens"]) if n > 0]
        tp = _tpot(m["times"], m["tokens"])
        if tp is None or len(gt) < 3:
            continue
        n = sum(c["tokens"] for c in gt)
        gt_wall = (gt[-1]["t_wall"] - gt[0]["t_wall"]) / (n - 1)
        gt_model = (gt[-1]["model_t"] - gt[0]["model_t"]) / (n - 1) / speedup
        if gt_wall > 0 and gt_model > 0:
            handoff.append(tp / gt_wall - 1.0)
            model.append(tp / gt_model - 1.0)
        if len(arr) == len(gt) and gt[-2]["t_wall"] > gt[0]["t_wall"]:
            inner.append((arr[-2][0] - arr[0][0]) / (gt[-2]["t_wall"] - gt[0]["t_wall"]) - 1.0)
    return handoff, model, inner


def _truth(path: Path) -> dict[str, list[dict]]:
    chunks: dict[str, list[dict]] = {}
    for line in path.read_text().splitlines():
        c = json.loads(line)
        chunks.setdefault(str(c["rid"]), []).append(c)
    return chunks


# --------------------------------------------------------------------------- one load point


def measure(client: str, *, concurrency: int | None, rate: float | None, requests_n: int, speedup: float,
            workdir: Path) -> dict[str, Any]:
    port = free_port()
    truth_path = workdir / f"truth-{port}.jsonl"
    argv = [sys.executable, "-m", "framework.servers.sim", "--model-path", "m", "--tp-size", "8", "--port", str(port),
            "--sim-speedup", str(speedup), "--sim-ground-truth", str(truth_path), "--random-seed", "1",
            "--sim-startup-s", "0", "--max-running-requests", "512", "--cuda-graph-max-bs", "256"]
    if rate is None:
        workload = Workload(prompt_tokens=PROMPT, output_tokens=OUTPUT, concurrency=concurrency or 1)
    else:
        workload = Workload(prompt_tokens=PROMPT, output_tokens=OUTPUT, request_rate=rate)
    plan = make_plan(workload, requests_n=requests_n, warmup=0 if rate else (concurrency or 1), seed=7)
    bodies = [request_body("generate", r.prompt, r.output_tokens, workload) for r in plan.requests]
    lateness: list[float] = []
    t = time.perf_counter()
    with ServerProcess(ServerSpec(argv, "127.0.0.1", port, workdir / f"sim-{port}.log", ready_timeout_s=60)) as srv:
        url = srv.spec.base_url
        if client == "async":
            rows: list[dict] = []
            out = run_workload(url, workload, requests_n=requests_n, warmup=0 if rate else (concurrency or 1), seed=7,
                               time_scale=speedup, on_row=lambda i, u, row: None if u else rows.append(row))
            measured = [{"times": r["chunk_times_s"], "tokens": r["chunk_tokens"], "rid": r["server_request_id"]}
                        for r in rows if r["ok"]]
            lateness = [r["send_lateness_wall_s"] for r in rows if r.get("send_lateness_wall_s") is not None]
            health = out["client"]
        elif client == "reference":
            res, lateness = reference_client(url, bodies, None if rate else concurrency,
                                             [r.send_at_s for r in plan.requests] if rate else None, speedup)
            measured = [m for m, r in zip(res, plan.requests) if r.phase == "measured"]
            health = None
        else:
            res = thread_client(url, bodies, concurrency or 1)
            measured = [m for m in res if plan.requests[m["index"]].phase == "measured"]
            health = None
    wall = time.perf_counter() - t
    handoff, model, inner = errors(measured, _truth(truth_path), speedup)
    return {"client": client, "concurrency": concurrency, "rate": rate, "n": len(handoff), "wall_s": wall,
            "handoff": handoff, "model": model, "inner": inner, "lateness": lateness, "health": health}


def _fmt_pct(values: list[float], q: float | None = None) -> str:
    if not values:
        return "-"
    a = np.abs(np.asarray(values))
    return f"{(np.median(a) if q is None else np.percentile(a, q)):.3%}"


def main_load(speedup: float, concurrencies: list[int], rates: list[float], clients: list[str], requests_n: int,
              workdir: Path, emit: Callable[[str], None] = print) -> None:
    emit(f"load sweep at speed-up {speedup:g}: prompt {PROMPT}, output {OUTPUT} tokens; TPOT error per request")
    emit("| client | load | requests | median abs. err vs hand-off | p90 | same, without the last chunk | p90 | "
         "median abs. err vs model clock | p90 | median send lateness | loop lag p50 | client bottleneck | wall s |")
    emit("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    points = [(c, None) for c in concurrencies] + [(None, r) for r in rates]
    for conc, rate in points:
        for client in clients:
            if client == "threads" and rate is not None:
                continue  # the previous client had no open loop
            n = max(requests_n, conc or 0)
            r = measure(client, concurrency=conc, rate=rate, requests_n=n, speedup=speedup, workdir=workdir)
            load = f"concurrency {conc}" if rate is None else f"{rate:g} req/s"
            late = f"{statistics.median(r['lateness']) * 1e3:.2f} ms" if r["lateness"] else "-"
            h = r["health"] or {}
            lag = (h.get("loop_lag_wall_s") or {}).get("p50")
            emit(f"| {client} | {load} | {r['n']} | {_fmt_pct(r['handoff'])} | {_fmt_pct(r['handoff'], 90)} | "
                 f"{_fmt_pct(r['inner'])} | {_fmt_pct(r['inner'], 90)} | {_fmt_pct(r['model'])} | {_fmt_pct(r['model'], 90)} | {late} | "
                 f"{'-' if lag is None else f'{lag * 1e3:.3f} ms'} | {h.get('bottleneck', '-')} | {r['wall_s']:.1f} |")
