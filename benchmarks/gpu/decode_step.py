"""The GPU server's decode step against the HBM roofline and HF transformers' ``torch.compile``, on one GPU.

    python benchmarks/gpu/decode_step.py STAGE --out DIR      (STAGE: check, step, http, hf; on a CUDA machine)

- ``check``: the fused path against the reference on the device: the Triton attention against masked SDPA on
  random data with the cache poisoned (NaN) past every row's length, and the fused step's logits (compiled
  pieces, eager) against the reference forward's, same cache, bf16, Llama-1B shape.
- ``step``: the roofline (bytes of weights over a measured device copy), then the median graph-replayed
  step of the reference path and of the fused path at batch 1, 8 and 64, timed with CUDA events
  (warm-up, 5 x 100 replays, median), and a profile of the fused step's kernels at batch 1.
- ``http``: the server (``python -m framework.servers.gpu``) over HTTP through the framework's own client,
  one token per event: decode tok/s per request at batch 1 and at concurrency 64.
- ``all``: every stage above, each in its own process under its own time limit, then one table: the step at
  batch 1 and 64, the roofline, HF's figure and the server over HTTP (with and without the overlap scheduler).
- ``hf``: HF transformers' Llama at the same shape, random weights, static cache, ``torch.compile``
  (``generate`` with ``cache_implementation="static"``): ms per step from two lengths' difference.

Each stage writes ``DIR/STAGE.json`` and prints one table; ``benchmarks/gpu/run_device.sh WHEELS decode``
runs them all in one call. Targets (issue 26): step <= 1.0 ms at batch 1, >= 800 tok/s per request over
HTTP at batch 1, batch 64 within 2x of batch 1.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from framework.servers.gpu.comm import no_multicast_env

no_multicast_env()

import torch  # noqa: E402

from framework.servers.gpu import shapes  # noqa: E402
from framework.servers.gpu.args import GpuServerArgs  # noqa: E402
from framework.servers.gpu.comm import TPGroup  # noqa: E402
from framework.servers.gpu.executor import Executor  # noqa: E402

SHAPE = shapes.PRESETS["llama-1b"]
CONTEXT, ROWS, POSITION = 512, 64, 160  # the experiment's server args; mid-way through a 128 + 64 request
BATCHES = (1, 8, 64)
# the server's default batch-1 projections: the targets are checked on the path the server runs by default
DEFAULT_GEMV: str = GpuServerArgs.model_fields["batch1_gemv"].default


def _events_ms(fn: Any, reps: int = 100, rounds: int = 5) -> float:
    """Median over rounds of the mean ms of ``reps`` calls, timed with CUDA events after a warm-up."""
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(rounds):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(reps):
            fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) / reps)
    return statistics.median(out)


def copy_tb_s() -> float:
    """Device-to-device copy, bytes read plus written, over a 4 GiB buffer."""
    src = torch.randn(2**30, device="cuda")
    dst = torch.empty_like(src)
    ms = _events_ms(lambda: dst.copy_(src), reps=10)
    return 2 * src.numel() * 4 / (ms / 1e3) / 1e12


def roofline() -> dict[str, Any]:
    bw = copy_tb_s()
    all_bytes = SHAPE.params() * 2
    read = all_bytes - SHAPE.vocab_size * SHAPE.hidden_size * 2  # the embedding: one row a token, not read whole
    return {"copy_tb_s": bw, "weight_bytes_with_embedding": all_bytes, "weight_bytes": read,
            "roofline_ms": read / (bw * 1e12) * 1e3}


def _executor(fused: bool, mode: str, seed: int = 0, batch1_gemv: str = DEFAULT_GEMV) -> Executor:
    """As the server builds it (overlap on: the step's graph also feeds the next step's inputs)."""
    return Executor(SHAPE, seed=seed, group=TPGroup(device=torch.device("cuda")), dtype=torch.bfloat16,
                    context=CONTEXT, max_rows=ROWS, fused=fused, compile_mode=mode, overlap=True,
                    batch1_gemv=batch1_gemv)


def _fill_cache(ex: Executor) -> None:
    g = torch.Generator(device="cuda").manual_seed(1)
    for t in ex.tcache.k + ex.tcache.v:
        t.copy_(torch.randn(t.shape, generator=g, device="cuda", dtype=torch.float32).to(t.dtype))


def stage_check(opts: argparse.Namespace) -> dict[str, Any]:
    from framework.servers.gpu.attention import decode_attention, decode_attention_ref

    out: dict[str, Any] = {"attention": []}
    g = torch.Generator(device="cuda").manual_seed(2)
    for B in (1, 5, 64):
        H, KV, C, D = 32, 8, CONTEXT, 64
        q = torch.randn(B, H, D, device="cuda", generator=g).bfloat16()
        kc = torch.randn(B, KV, C, D, device="cuda", generator=g).bfloat16()
        vc = torch.randn(B, KV, C, D, device="cuda", generator=g).bfloat16()
        lens = torch.randint(1, C + 1, (B,), device="cuda", generator=g)
        ref = decode_attention_ref(q.double(), kc.double(), vc.double(), lens)
        for b in range(B):  # poison past each row's length: the kernel must not read it
            kc[b, :, int(lens[b]):] = float("nan")
            vc[b, :, int(lens[b]):] = float("nan")
        got = torch.full_like(q, float("nan"))
        got.copy_(decode_attention(q, kc, vc, lens))
        rel = ((got.double() - ref).norm() / ref.norm()).item()
        out["attention"].append({"batch": B, "rel_err_vs_float64": rel, "nan": bool(got.isnan().any())})
    from framework.servers.gpu.gemv import gemv_accumulate_triton, gemv_partials_ref, gemv_partials_triton, plan_for

    out["gemv"] = []
    for name, n, k, swiglu in (("o", 2048, 2048, False), ("down", 2048, 8192, True)):
        plan = plan_for(n, k)
        assert plan is not None
        w = (torch.randn(n, k, device="cuda", generator=g) * k ** -0.5).bfloat16()
        x = torch.randn(1, 2 * k if swiglu else k, device="cuda", generator=g).bfloat16()
        ref = gemv_partials_ref(x.double(), w.double(), plan.splits, swiglu).sum(0)
        got = gemv_partials_triton(x, w, plan, swiglu).sum(0)
        acc = torch.full((1, n), float("nan"), device="cuda")
        acc.zero_()
        gemv_accumulate_triton(x, w, plan, acc, swiglu)
        out["gemv"].append({"proj": name, "plan": plan._asdict(), "nan": bool(got.isnan().any() or acc.isnan().any()),
                            "rel_err_vs_float64": max(((t.double() - ref).norm() / ref.norm()).item()
                                                      for t in (got, acc))})
    ref_ex, fused_ex = _executor(False, "none"), _executor(True, opts.mode, batch1_gemv="split-k")
    # 64 rows (the server's first captured batch size, so this compile is the one the server reuses), lengths
    # 1 .. 200, row 1 at 128
    lengths = [17, 128, 70, 3, *torch.randint(1, 201, (ROWS - 4,), generator=torch.Generator().manual_seed(5)).tolist()]
    prompts = [torch.randint(0, SHAPE.vocab_size, (n,), generator=torch.Generator().manual_seed(i)).tolist()
               for i, n in enumerate(lengths)]
    with torch.inference_mode():
        for ex in (ref_ex, fused_ex):
            for row, ids in enumerate(prompts):
                ex.prefill(row, ids)
        tokens = torch.randint(0, SHAPE.vocab_size, (ROWS,), generator=torch.Generator().manual_seed(9)).cuda()
        positions = torch.tensor([len(p) for p in prompts], device="cuda")
        want = ref_ex.target(tokens.unsqueeze(1), positions.unsqueeze(1), ref_ex.tcache)[:, -1].float()
        assert fused_ex.fused is not None
        got = fused_ex.fused.logits(tokens, positions, fused_ex.tcache).float()
        kerr = max(((a.float() - b.float()).norm() / a.float().norm()).item()
                   for a, b in zip(ref_ex.tcache.k, fused_ex.tcache.k, strict=True))
        # batch 1 (the split-K GEMV path): row 1's next token alone, against the reference on a copy of its cache
        assert fused_ex.fused.plans is not None
        one_ref = ref_ex.target(tokens[1:2].unsqueeze(1), positions[1:2].unsqueeze(1), _row_cache(ref_ex, 1))
        one = fused_ex.fused.logits(tokens[1:2], positions[1:2], _row_cache(fused_ex, 1)).float()
        one_ref = one_ref[:, -1].float()
    out["step"] = {"rel_err_logits": ((got - want).norm() / want.norm()).item(),
                   "same_argmax": f"{int((got.argmax(-1) == want.argmax(-1)).sum())} of {ROWS}",
                   "rel_err_k_cache": kerr,
                   "compile_mode": opts.mode,
                   "batch1_split_k_rel_err_logits": ((one - one_ref).norm() / one_ref.norm()).item(),
                   "batch1_same_argmax": bool((one.argmax(-1) == one_ref.argmax(-1)).all())}
    ok = all(a["rel_err_vs_float64"] < 2e-2 and not a["nan"] for a in out["attention"] + out["gemv"])
    out["ok"] = ok and out["step"]["rel_err_logits"] < 5e-2 and out["step"]["batch1_split_k_rel_err_logits"] < 5e-2
    print(json.dumps(out, indent=1))
    return out


def _row_cache(ex: Executor, row: int) -> Any:
    """A one-row cache holding a copy of ``row`` of the executor's cache (the batch-1 step reads row 0)."""
    from framework.servers.gpu.model import KVCache

    return KVCache([k[row:row + 1].clone() for k in ex.tcache.k], [v[row:row + 1].clone() for v in ex.tcache.v])


def _graph_us(fn: Any, calls: int = 40) -> float:
    """Median us per call of ``fn`` replayed ``calls`` times inside one CUDA graph (no launch cost from Python)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for i in range(3):
            fn(i)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for i in range(calls):
            fn(i)
    return _events_ms(graph.replay, reps=10) * 1e3 / calls


def _gemv_bench() -> list[dict[str, Any]]:
    """The batch-1 projections alone, each call on another of 8 weights (past the 60 MB L2), inside a CUDA graph:
    the split-K kernel (atomic adds, as the server runs it) against cuBLAS (``x @ w.t()``); TB/s of weight read."""
    from framework.servers.gpu.gemv import gemv_accumulate_triton, plan_for

    rows = []
    for name, n, k, swiglu in (("o", 2048, 2048, False), ("down", 2048, 8192, True), ("gate_up", 16384, 2048, False),
                               ("qkv", 3072, 2048, False)):
        plan = plan_for(n, k)
        ws = [torch.randn(n, k, device="cuda").bfloat16() for _ in range(8)]
        x = torch.randn(1, 2 * k if swiglu else k, device="cuda").bfloat16()
        xin = x[:, :k].contiguous()
        acc = torch.zeros(1, n, device="cuda")
        kern = None
        if plan is not None:
            kern = _graph_us(lambda i, x=x, ws=ws, plan=plan, sw=swiglu, acc=acc: gemv_accumulate_triton(
                x, ws[i % 8], plan, acc, sw))
        blas = _graph_us(lambda i, xin=xin, ws=ws: xin @ ws[i % 8].t())
        row = {"proj": name, "n": n, "k": k, "plan": plan._asdict() if plan else None, "split_k_us": kern,
               "cublas_us": blas, "split_k_tb_s": kern and n * k * 2 / kern / 1e6,
               "cublas_tb_s": n * k * 2 / blas / 1e6}
        rows.append(row)
        print("gemv", json.dumps(row), flush=True)
    return rows


def stage_step(opts: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"roofline": roofline(), "paths": {}, "gemv": _gemv_bench()}
    # "fused" is the server's default path (its batch-1 projections as the server's default ``--batch1-gemv``),
    # the one the targets are checked on; the other batch-1 projection kernel is timed beside it
    other = next(g for g in ("split-k", "compiled") if g != DEFAULT_GEMV)
    paths = [("reference", False, "none", DEFAULT_GEMV, BATCHES), ("fused", True, opts.mode, DEFAULT_GEMV, BATCHES),
             (f"fused_{other.replace('-', '_')}_gemv", True, opts.mode, other, (1,))]
    out["default_batch1_gemv"] = DEFAULT_GEMV
    for name, fused, mode, gemv, batches in paths:
        ex = _executor(fused, mode, batch1_gemv=gemv)
        _fill_cache(ex)
        t0 = time.perf_counter()
        ex.capture(list(batches))
        took = time.perf_counter() - t0
        res: dict[str, Any] = {"capture_s": took}
        for bs in batches:
            ex.pos[:bs] = POSITION
            graph = ex.graphs[bs][0]
            res[f"bs{bs}_ms"] = _events_ms(graph.replay)
        out["paths"][name] = res
        print(name, json.dumps(res), flush=True)
        if fused and gemv == DEFAULT_GEMV:
            out["profile"] = _profile(ex)
        del ex
        torch.cuda.empty_cache()
    r, f = out["roofline"], out["paths"]["fused"]
    print(f"\nroofline {r['roofline_ms']:.3f} ms ({r['weight_bytes'] / 1e9:.2f} GB of weights a step reads, the "
          f"embedding's one row aside, at {r['copy_tb_s']:.2f} TB/s device copy)")
    print("| path | bs1 ms | % roofline | bs8 ms | bs64 ms | bs64 / bs1 |\n|---|---|---|---|---|---|")
    for name, p in out["paths"].items():
        b1, b8, b64 = p["bs1_ms"], p.get("bs8_ms"), p.get("bs64_ms")
        cols = ["" if v is None else f"{v:.3f}" for v in (b8, b64)] + ["" if b64 is None else f"{b64 / b1:.2f}"]
        print(f"| {name} | {b1:.3f} | {100 * r['roofline_ms'] / b1:.1f} | " + " | ".join(cols) + " |")
    out["targets"] = {"bs1_le_1ms": f["bs1_ms"] <= 1.0, "bs64_within_2x": f["bs64_ms"] <= 2 * f["bs1_ms"]}
    print(f"targets (path 'fused', the server's default: --batch1-gemv {DEFAULT_GEMV})", out["targets"])
    return out


def _profile(ex: Executor) -> list[dict[str, Any]]:
    """Kernels of the fused step at batch 1, eager (the same kernels the graph replays), by total time."""
    from torch.profiler import ProfilerActivity, profile

    ex.pos[:1] = POSITION
    with torch.inference_mode():
        for _ in range(3):
            ex._decode_fn(1)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                ex._decode_fn(1)
            torch.cuda.synchronize()
    rows = []
    for ev in prof.key_averages():
        t = getattr(ev, "device_time_total", None) or getattr(ev, "cuda_time_total", 0)
        if t:
            rows.append({"kernel": ev.key[:90], "calls_per_step": ev.count / 10, "us_per_step": t / 10})
    rows.sort(key=lambda r: -r["us_per_step"])
    total = sum(r["us_per_step"] for r in rows)
    print(f"\nfused step, batch 1, kernel time {total:.0f} us per step ({sum(r['calls_per_step'] for r in rows):.0f} "
          "kernels):")
    for r in rows[:14]:
        print(f"  {r['us_per_step']:8.1f} us  x{r['calls_per_step']:5.1f}  {r['kernel']}")
    return rows[:40]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(opts: argparse.Namespace, tag: str, extra: list[str], loads: list[tuple[str, int, int]]
           ) -> dict[str, Any]:
    """One server (``extra`` flags), the framework's client over each load: (label, concurrency, requests)."""
    import requests

    from framework.core.workload import Workload
    from framework.execution.client.loops import run_workload

    port = _free_port()
    cmd = [sys.executable, "-m", "framework.servers.gpu", "--model-path", opts.model_path, "--context-length",
           str(CONTEXT), "--max-running-requests", str(ROWS), "--cuda-graph-max-bs", str(ROWS), "--port", str(port),
           "--random-seed", "0", "--torch-compile-mode", opts.mode, *opts.server_args, *extra]
    log = open(Path(opts.out) / f"http_server_{tag}.log", "w")
    t0 = time.perf_counter()
    server = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=os.environ.copy())
    out: dict[str, Any] = {"cmd": cmd}
    try:
        while True:
            if server.poll() is not None:
                raise RuntimeError(f"server exited {server.returncode}; see http_server_{tag}.log")
            try:
                if requests.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                pass
            time.sleep(0.5)
        out["ready_s"] = time.perf_counter() - t0
        out["server_info"] = requests.get(f"http://127.0.0.1:{port}/get_server_info", timeout=5).json()
        for label, conc, n in loads:
            rows: list[dict[str, Any]] = []
            wl = Workload(prompt_tokens=128, output_tokens=64, concurrency=conc, temperature=0.0, ignore_eos=True,
                          request_timeout_s=120)
            run_workload(f"http://127.0.0.1:{port}", wl, requests_n=n, warmup=4 if conc == 1 else 64, seed=7,
                         on_row=lambda i, unanalysed, row, kept=rows: None if unanalysed else kept.append(row))
            rates = sorted(r["decode_tok_s"] for r in rows if r.get("decode_tok_s"))
            out[label] = {"requests": len(rates), "median_decode_tok_s": statistics.median(rates),
                          "mean_decode_tok_s": statistics.fmean(rates), "min_decode_tok_s": rates[0],
                          "max_decode_tok_s": rates[-1], "ms_per_token": 1e3 / statistics.median(rates)}
            print(tag, label, json.dumps(out[label]), flush=True)
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
    return out


def stage_http(opts: argparse.Namespace) -> dict[str, Any]:
    """The server as the records run it (overlap on), then with ``--disable-overlap-schedule`` at batch 1."""
    out: dict[str, Any] = {"overlap": _serve(opts, "overlap", [], [("batch1", 1, 24), ("conc64", 64, 128)])}
    if not opts.quick:
        out["no_overlap"] = _serve(opts, "no_overlap", ["--disable-overlap-schedule"], [("batch1", 1, 24)])
    out["batch1"], out["conc64"] = out["overlap"]["batch1"], out["overlap"]["conc64"]
    out["target_800"] = out["batch1"]["median_decode_tok_s"] >= 800
    print("over HTTP, batch 1:", f"{out['batch1']['median_decode_tok_s']:.0f} tok/s per request", out["target_800"])
    return out


def stage_hf(opts: argparse.Namespace) -> dict[str, Any]:
    from transformers import LlamaConfig, LlamaForCausalLM

    s = SHAPE
    cfg = LlamaConfig(hidden_size=s.hidden_size, intermediate_size=s.intermediate_size,
                      num_hidden_layers=s.num_hidden_layers, num_attention_heads=s.num_attention_heads,
                      num_key_value_heads=s.num_key_value_heads, vocab_size=s.vocab_size, head_dim=s.dim_head,
                      rope_theta=s.rope_theta, rms_norm_eps=s.rms_norm_eps, tie_word_embeddings=False,
                      max_position_embeddings=CONTEXT)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to("cuda", torch.bfloat16).eval()
    out: dict[str, Any] = {"transformers": __import__("transformers").__version__}
    for bs in opts.hf_batches:
        ids = torch.randint(0, s.vocab_size, (bs, 128), device="cuda")

        def gen(n: int, ids: torch.Tensor = ids) -> float:
            torch.cuda.synchronize()
            t = time.perf_counter()
            model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                           cache_implementation="static", pad_token_id=0)
            torch.cuda.synchronize()
            return time.perf_counter() - t

        t0 = time.perf_counter()
        gen(8)
        gen(8)
        warm = time.perf_counter() - t0
        diffs = [(gen(96) - gen(32)) / 64 * 1e3 for _ in range(3)]
        out[f"bs{bs}_ms"] = statistics.median(diffs)
        out[f"bs{bs}_warmup_s"] = warm
        print(f"HF static cache + torch.compile, batch {bs}: {out[f'bs{bs}_ms']:.3f} ms/step", flush=True)
    return out


STAGES = ("check", "step", "http", "hf")


def stage_all(opts: argparse.Namespace) -> dict[str, Any]:
    """Every stage in its own process (its own GPU memory and compile state), each under its time limit, then
    one table of the figures issue 26 asks for."""
    limits = dict(zip(STAGES, opts.stage_timeouts, strict=True))
    argv = ["--out", opts.out, "--mode", opts.mode, "--model-path", opts.model_path,
            "--hf-batches", *map(str, opts.hf_batches), *(["--quick"] if opts.quick else [])]
    if opts.server_args:
        argv += ["--server-args", *opts.server_args]
    rc: dict[str, Any] = {}
    for stage in opts.stages:
        t0 = time.perf_counter()
        with open(Path(opts.out) / f"{stage}.log", "w") as log:
            try:
                rc[stage] = subprocess.run([sys.executable, __file__, stage, *argv], stdout=log,
                                           stderr=subprocess.STDOUT, timeout=limits[stage]).returncode
            except subprocess.TimeoutExpired:
                rc[stage] = f"killed after {limits[stage]} s"
        print(f"stage {stage}: rc={rc[stage]} ({time.perf_counter() - t0:.0f} s)", flush=True)
    files = {s: Path(opts.out, f"{s}.json") for s in STAGES}
    res = {s: json.loads(f.read_text()) for s, f in files.items() if f.exists()}
    _summary(res)
    return {"rc": rc}


def _summary(res: dict[str, Any]) -> None:
    def f(x: Any, fmt: str = ".3f") -> str:
        return "-" if x is None else format(x, fmt)

    step, http, hf, check = res.get("step", {}), res.get("http", {}), res.get("hf", {}), res.get("check", {})
    roof = step.get("roofline", {}).get("roofline_ms")
    print("\n## decode_step.py all: Llama-1B shape, bf16, one GPU")
    print(f"device check ok: {check.get('ok')}")
    if roof:
        print(f"roofline {roof:.3f} ms ({step['roofline']['weight_bytes'] / 1e9:.2f} GB at "
              f"{step['roofline']['copy_tb_s']:.2f} TB/s device copy)")
    print("| implementation | batch 1 ms/step | % of roofline | batch 64 ms/step | bs64 / bs1 |\n|---|---|---|---|---|")
    for name, p in step.get("paths", {}).items():
        b1, b64 = p.get("bs1_ms"), p.get("bs64_ms")
        print(f"| {name}, CUDA graph | {f(b1)} | {f(roof and b1 and 100 * roof / b1, '.1f')} | {f(b64)} | "
              f"{f(b64 and b64 / b1, '.2f')} |")
    b1, b64 = hf.get("bs1_ms"), hf.get("bs64_ms")
    print(f"| HF transformers, static cache, torch.compile (generate) | {f(b1)} | "
          f"{f(roof and b1 and 100 * roof / b1, '.1f')} | {f(b64)} | {f(b1 and b64 and b64 / b1, '.2f')} |")
    print("\n| over HTTP (framework client, one token per event) | tok/s per request (median) | ms/token |"
          "\n|---|---|---|")
    for tag, label in (("overlap", "batch1"), ("no_overlap", "batch1"), ("overlap", "conc64")):
        r = http.get(tag, {}).get(label)
        if r:
            print(f"| {tag}, {label} ({r['requests']} requests) | {r['median_decode_tok_s']:.0f} | "
                  f"{r['ms_per_token']:.3f} |")
    fused = step.get("paths", {}).get("fused", {})
    b1 = http.get("batch1", {}).get("median_decode_tok_s")
    print("targets: step <= 1.0 ms:", fused.get("bs1_ms") is not None and fused["bs1_ms"] <= 1.0,
          "| bs64 within 2x:", bool(fused.get("bs64_ms")) and fused["bs64_ms"] <= 2 * fused["bs1_ms"],
          "| >= 800 tok/s over HTTP:", b1 is not None and b1 >= 800)


def main() -> None:
    p = argparse.ArgumentParser(prog="python benchmarks/gpu/decode_step.py")
    p.add_argument("stage", choices=(*STAGES, "all"))
    p.add_argument("--out", required=True)
    p.add_argument("--mode", default="max-autotune-no-cudagraphs", help="torch.compile mode of the fused pieces")
    p.add_argument("--model-path", default="llama-1b", help="http: the server's model (tiny runs on a CPU)")
    p.add_argument("--server-args", nargs="*", default=[])
    p.add_argument("--hf-batches", nargs="*", type=int, default=[1, 64])
    p.add_argument("--quick", action="store_true", help="http: leave out the batch-1 run without overlap")
    p.add_argument("--stages", nargs="*", choices=STAGES, default=list(STAGES), help="all: the stages to run")
    p.add_argument("--stage-timeouts", nargs=4, type=int, default=[300, 240, 150, 150], metavar="S",
                   help="all: seconds for check, step, http, hf")
    opts = p.parse_args()
    Path(opts.out).mkdir(parents=True, exist_ok=True)
    fn = {"check": stage_check, "step": stage_step, "http": stage_http, "hf": stage_hf, "all": stage_all}[opts.stage]
    res = fn(opts)
    res["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    Path(opts.out, f"{opts.stage}.json").write_text(json.dumps(res, indent=1, default=str))


if __name__ == "__main__":
    main()
