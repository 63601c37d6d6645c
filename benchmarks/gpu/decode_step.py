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
from framework.servers.gpu.comm import TPGroup  # noqa: E402
from framework.servers.gpu.executor import Executor  # noqa: E402

SHAPE = shapes.PRESETS["llama-1b"]
CONTEXT, ROWS, POSITION = 512, 64, 160  # the experiment's server args; mid-way through a 128 + 64 request
BATCHES = (1, 8, 64)


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


def _executor(fused: bool, mode: str, seed: int = 0) -> Executor:
    return Executor(SHAPE, seed=seed, group=TPGroup(device=torch.device("cuda")), dtype=torch.bfloat16,
                    context=CONTEXT, max_rows=ROWS, fused=fused, compile_mode=mode)


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
    ref_ex, fused_ex = _executor(False, "none"), _executor(True, opts.mode)
    prompts = [torch.randint(0, SHAPE.vocab_size, (n,), generator=torch.Generator().manual_seed(n)).tolist()
               for n in (17, 128, 70, 3)]
    with torch.inference_mode():
        for ex in (ref_ex, fused_ex):
            for row, ids in enumerate(prompts):
                ex.prefill(row, ids)
        tokens = torch.tensor([11, 22, 33, 44], device="cuda")
        positions = torch.tensor([len(p) for p in prompts], device="cuda")
        want = ref_ex.target(tokens.unsqueeze(1), positions.unsqueeze(1), ref_ex.tcache)[:, -1].float()
        assert fused_ex.fused is not None
        got = fused_ex.fused.logits(tokens, positions, fused_ex.tcache).float()
        kerr = max(((a[:4].float() - b[:4].float()).norm() / a[:4].float().norm()).item()
                   for a, b in zip(ref_ex.tcache.k, fused_ex.tcache.k, strict=True))
    out["step"] = {"rel_err_logits": ((got - want).norm() / want.norm()).item(),
                   "same_argmax": (got.argmax(-1) == want.argmax(-1)).tolist(), "rel_err_k_cache": kerr,
                   "compile_mode": opts.mode}
    ok = all(a["rel_err_vs_float64"] < 2e-2 and not a["nan"] for a in out["attention"])
    out["ok"] = ok and out["step"]["rel_err_logits"] < 5e-2
    print(json.dumps(out, indent=1))
    return out


def stage_step(opts: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"roofline": roofline(), "paths": {}}
    for name, fused, mode in (("reference", False, "none"), ("fused", True, opts.mode)):
        ex = _executor(fused, mode)
        _fill_cache(ex)
        t0 = time.perf_counter()
        ex.capture(list(BATCHES))
        took = time.perf_counter() - t0
        res = {"capture_s": took}
        for bs in BATCHES:
            ex.pos[:bs] = POSITION
            graph = ex.graphs[bs][0]
            res[f"bs{bs}_ms"] = _events_ms(graph.replay)
        out["paths"][name] = res
        print(name, json.dumps(res), flush=True)
        if fused:
            out["profile"] = _profile(ex)
        del ex
        torch.cuda.empty_cache()
    r, f = out["roofline"], out["paths"]["fused"]
    print(f"\nroofline {r['roofline_ms']:.3f} ms ({r['weight_bytes'] / 1e9:.2f} GB of weights a step reads, the "
          f"embedding's one row aside, at {r['copy_tb_s']:.2f} TB/s device copy)")
    print("| path | bs1 ms | % roofline | bs8 ms | bs64 ms | bs64 / bs1 |\n|---|---|---|---|---|---|")
    for name, p in out["paths"].items():
        print(f"| {name} | {p['bs1_ms']:.3f} | {100 * r['roofline_ms'] / p['bs1_ms']:.1f} | {p['bs8_ms']:.3f} | "
              f"{p['bs64_ms']:.3f} | {p['bs64_ms'] / p['bs1_ms']:.2f} |")
    out["targets"] = {"bs1_le_1ms": f["bs1_ms"] <= 1.0, "bs64_within_2x": f["bs64_ms"] <= 2 * f["bs1_ms"]}
    print("targets", out["targets"])
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


def stage_http(opts: argparse.Namespace) -> dict[str, Any]:
    import requests

    from framework.core.workload import Workload
    from framework.execution.client.loops import run_workload

    port = _free_port()
    cmd = [sys.executable, "-m", "framework.servers.gpu", "--model-path", opts.model_path, "--context-length",
           str(CONTEXT), "--max-running-requests", str(ROWS), "--cuda-graph-max-bs", str(ROWS), "--port", str(port),
           "--random-seed", "0", "--torch-compile-mode", opts.mode, *opts.server_args]
    log = open(Path(opts.out) / "http_server.log", "w")
    t0 = time.perf_counter()
    server = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=os.environ.copy())
    out: dict[str, Any] = {"cmd": cmd}
    try:
        while True:
            if server.poll() is not None:
                raise RuntimeError(f"server exited {server.returncode}; see http_server.log")
            try:
                if requests.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                pass
            time.sleep(0.5)
        out["ready_s"] = time.perf_counter() - t0
        out["server_info"] = requests.get(f"http://127.0.0.1:{port}/get_server_info", timeout=5).json()
        for label, conc, n in (("batch1", 1, 24), ("conc64", 64, 128)):
            rows: list[dict[str, Any]] = []
            wl = Workload(prompt_tokens=128, output_tokens=64, concurrency=conc, temperature=0.0, ignore_eos=True,
                          request_timeout_s=120)
            run_workload(f"http://127.0.0.1:{port}", wl, requests_n=n, warmup=4 if conc == 1 else 64, seed=7,
                         on_row=lambda i, unanalysed, row, kept=rows: None if unanalysed else kept.append(row))
            rates = [r["decode_tok_s"] for r in rows if r.get("decode_tok_s")]
            out[label] = {"requests": len(rates), "median_decode_tok_s": statistics.median(rates),
                          "mean_decode_tok_s": statistics.fmean(rates), "ms_per_token": 1e3 / statistics.median(rates)}
            print(label, json.dumps(out[label]), flush=True)
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
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
    for bs in (1, 64):
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


def main() -> None:
    p = argparse.ArgumentParser(prog="python benchmarks/gpu/decode_step.py")
    p.add_argument("stage", choices=("check", "step", "http", "hf"))
    p.add_argument("--out", required=True)
    p.add_argument("--mode", default="max-autotune-no-cudagraphs", help="torch.compile mode of the fused pieces")
    p.add_argument("--model-path", default="llama-1b", help="http: the server's model (tiny runs on a CPU)")
    p.add_argument("--server-args", nargs="*", default=[])
    opts = p.parse_args()
    Path(opts.out).mkdir(parents=True, exist_ok=True)
    fn = {"check": stage_check, "step": stage_step, "http": stage_http, "hf": stage_hf}[opts.stage]
    res = fn(opts)
    res["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    Path(opts.out, f"{opts.stage}.json").write_text(json.dumps(res, indent=1, default=str))


if __name__ == "__main__":
    main()
