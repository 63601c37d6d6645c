"""``python -m framework.servers.gpu``: start the GPU server (the imperative shell).

Order, as the sim and SGLang: the port is bound first (``/health`` answers 503), then the TP workers
join, weights are drawn, the KV cache is allocated and CUDA graphs are captured (without graphs, the
compiled decode pieces are built by one eager step per batch size), then ``/health`` answers 200 and the
log says ``The server is fired up and ready to roll!``. Ranks 1..tp-1 are child processes
(``--worker-rank``) that die with rank 0; a start-up failure on any rank exits 1 with the traceback in
the log.
"""

from __future__ import annotations

import asyncio
import ctypes
import faulthandler
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Any

from framework.servers.gpu.comm import no_multicast_env

no_multicast_env()  # before torch or NCCL are loaded, in this process and every one it starts

import torch  # noqa: E402
import uvicorn  # noqa: E402

from framework.servers.api.server import Metrics, ServerState, build_request_models, create_app  # noqa: E402
from framework.servers.gpu import build, comm, hardware, hf_weights, shapes  # noqa: E402
from framework.servers.gpu.args import GpuServerArgs, parse_server_args  # noqa: E402
from framework.servers.gpu.engine import Driver, GpuEngine, SpecConfig, worker_loop  # noqa: E402
from framework.servers.gpu.executor import Executor, graph_batch_sizes  # noqa: E402

log = logging.getLogger("framework.servers.gpu")
# a hung start-up prints every stack after this long; the fused path's first compile on a machine (cold
# Inductor cache, max-autotune) takes about 3 minutes on an H200, and a dump in the middle of it
# was followed by the server dying (exit -11) once, so the dump waits past it
STARTUP_STACKS_AFTER_S = 600.0


def _setup_logging(level: str, rank: int) -> None:
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), stream=sys.stdout,
                        format=f"[%(asctime)s TP{rank}] %(message)s", datefmt="%Y-%m-%d %H:%M:%S", force=True)


def _die_with_parent() -> None:
    """Linux: SIGKILL this worker when rank 0 exits, however it exits."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _device(args: GpuServerArgs) -> str:
    if args.device != "auto":
        return args.device
    return "cuda" if torch.cuda.is_available() else "cpu"


def _dtype(args: GpuServerArgs, device: str) -> torch.dtype:
    if args.dtype == "auto":
        return torch.bfloat16 if device == "cuda" else torch.float32
    return getattr(torch, args.dtype)


def _spec(args: GpuServerArgs) -> SpecConfig | None:
    if args.speculative_algorithm is None:
        return None
    k = args.num_draft_tokens
    return SpecConfig(num_steps=k - 1, topk=1, num_draft_tokens=k, accept_rate=args.speculative_accept_rate,
                      algorithm="NGRAM" if args.speculative_algorithm == "NGRAM" else "EAGLE")


def fused_decode(args: GpuServerArgs, device: str) -> bool:
    """The fused path runs TP1 decode without speculation on CUDA; everything else takes the reference."""
    return (args.decode_path == "fused" and device == "cuda" and args.tp_size == 1
            and args.speculative_algorithm is None)


def warmup_sizes(args: GpuServerArgs, device: str, compiled: bool) -> list[int]:
    """Batch sizes to run once before ``/health`` says ready when no CUDA graphs are captured: the eager arm's
    compiled pieces would otherwise compile inside its first requests (100 s each on a cold Inductor cache,
    against a 120 s request timeout). Empty where nothing compiles or the graph capture warms them."""
    graphs = device == "cuda" and not args.disable_cuda_graph
    if graphs or not compiled:
        return []
    return graph_batch_sizes(args.max_running_requests)


def build_executor(args: GpuServerArgs, rank: int, seed: int) -> Executor:
    """Join the TP group, draw the weights, allocate caches, capture graphs: every rank, same order."""
    faulthandler.dump_traceback_later(STARTUP_STACKS_AFTER_S)  # a hung start-up shows where it hangs, in the log
    device = _device(args)
    if device == "cuda" and torch.cuda.device_count() < args.tp_size:
        raise RuntimeError(f"--tp-size {args.tp_size} needs {args.tp_size} GPUs; {torch.cuda.device_count()} visible")
    shape = shapes.resolve(args.model_path)
    dtype = _dtype(args, device)
    if device == "cuda":
        # cuDNN's attention builds an execution plan per new (batch, length) of a prefill, 60-130 ms each, inside
        # the request that first brings that shape (measured on an H200: a first prefill 64-133 ms, again 11-19 ms;
        # without cuDNN 16-38 ms, again 16-25 ms). A server restarted per launch meets new shapes in every launch,
        # so its TTFT measured plan builds; SGLang's attention backends build no plan per shape.
        torch.backends.cuda.enable_cudnn_sdp(False)
        log.info("Attention: cuDNN's SDPA backend off (it builds a plan per new prefill shape)")
    t0 = time.perf_counter()
    group = comm.init(rank, args.tp_size, device, args.dist_init_method or "")
    log.info(f"Init torch distributed ends. tp_size={args.tp_size} backend={group.impl}")
    spec = _spec(args)
    k = spec.num_draft_tokens if spec else 0
    ex = Executor(shape, seed=seed, group=group, dtype=dtype, context=args.context_length,
                  max_rows=args.max_running_requests, draft_tokens=k, fused=fused_decode(args, device),
                  compile_mode=args.torch_compile_mode, overlap=not args.disable_overlap_schedule,
                  batch1_gemv=args.batch1_gemv, drafter="ngram" if spec and spec.algorithm == "NGRAM" else "model",
                  weights=args.model_path if hf_weights.has_weights(args.model_path) else None)
    draft = "none" if not k else "n-gram lookup" if spec and spec.algorithm == "NGRAM" else "1 layer"
    log.info(f"Load weight end. shape={shape.name} params={shape.params() / 1e9:.2f}B dtype={dtype} "
             f"weights={'safetensors' if ex.weights_info else 'random'} draft={draft} "
             f"({time.perf_counter() - t0:.1f} s)")
    if args.enable_torch_symm_mem:
        bs = max(graph_batch_sizes(args.cuda_graph_max_bs or args.max_running_requests))
        comm.enable_symm_mem(group, max(bs, args.max_running_requests) * max(1, k) * shape.hidden_size, dtype)
        log.info(f"Torch symmetric memory: one-shot all-reduce (multicast off) impl={group.impl}")
    if device == "cuda" and not args.disable_cuda_graph:
        sizes = graph_batch_sizes(min(args.cuda_graph_max_bs or args.max_running_requests, args.max_running_requests))
        log.info(f"Capture cuda graph begin. bs {sizes}")
        took = ex.capture(sizes)
        log.info(f"Capture cuda graph end. Time elapsed: {took:.2f} s")
    compiled = ex.fused is not None and ex.fused.compile_mode != "none" and device == "cuda"
    warm = warmup_sizes(args, device, compiled)
    if warm:
        log.info(f"Compile warm-up begin (no cuda graph). bs {warm}")
        took = ex.warm(warm)
        log.info(f"Compile warm-up end. Time elapsed: {took:.2f} s")
    faulthandler.cancel_dump_traceback_later()
    return ex


def worker_main(args: GpuServerArgs) -> int:
    _die_with_parent()
    seed = args.random_seed if args.random_seed is not None else 0
    ex = build_executor(args, args.worker_rank, seed)
    worker_loop(ex, args.context_length)
    comm.shutdown()
    return 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawn_workers(argv: list[str], args: GpuServerArgs, seed: int) -> tuple[list[subprocess.Popen], str]:
    init = f"tcp://127.0.0.1:{_free_port()}"
    procs = []
    for rank in range(1, args.tp_size):
        cmd = [sys.executable, "-m", "framework.servers.gpu", *argv, "--random-seed", str(seed),
               "--worker-rank", str(rank), "--dist-init-method", init]
        procs.append(subprocess.Popen(cmd, stdout=sys.stdout, stderr=sys.stderr))
    return procs, init


def backend_info(args: GpuServerArgs, spec: SpecConfig | None, device: torch.device) -> dict[str, Any]:
    shape = shapes.resolve(args.model_path)
    real = hf_weights.has_weights(args.model_path)
    ngram = spec is not None and spec.algorithm == "NGRAM"
    return {
        "backend": "gpu",
        "version": f"framework-gpuserver (torch {torch.__version__})",
        "cuda_graph_max_bs": min(args.cuda_graph_max_bs or args.max_running_requests, args.max_running_requests),
        "gpu_server": {
            "shape": shape.model_dump(), "params": shape.params(),
            "weights": "safetensors" if real else "random, seeded",
            # the converted directory's identity (framework.assets.smollm2_hf's manifest) when it has one
            "weights_digest": hf_weights.conversion_digest(args.model_path) if real else None,
            "all_reduce": ("none" if args.tp_size == 1 else
                           "symm_mem_one_shot" if args.enable_torch_symm_mem else "nccl"),
            "cuda_graphs": device.type == "cuda" and not args.disable_cuda_graph,
            "decode_path": "fused" if fused_decode(args, device.type) else "reference",
            "torch_compile_mode": args.torch_compile_mode if fused_decode(args, device.type) else None,
            "batch1_gemv": args.batch1_gemv if fused_decode(args, device.type) else None,
            # what the build chose (autotune, Inductor's switches, the cache's autotune digest: servers/gpu/build.py)
            "build": build.facts(args.torch_compile_mode, args.batch1_gemv, fused_decode(args, device.type)),
            "overlap_schedule": (not args.disable_overlap_schedule and args.tp_size == 1
                                 and args.speculative_algorithm is None),
            "speculative_algorithm": spec.algorithm if spec else None,
            "speculative_acceptance": "greedy verification" if ngram else "declared" if spec else None,
            "speculative_accept_rate": spec.accept_rate if spec and not ngram else None,
            "draft_model": "n-gram lookup (prompt and output)" if ngram else f"{shape.name}-draft (1 layer)" if spec
            else None,
        },
        "hardware": hardware.facts(device, args.tp_size),
    }


async def _serve(state: ServerState, server: uvicorn.Server, engine: GpuEngine,
                 workers: list[subprocess.Popen]) -> int:
    serve_task = asyncio.create_task(server.serve())
    while not server.started:
        if serve_task.done():
            return 1
        await asyncio.sleep(0.005)
    failed: list[BaseException] = []
    loop = asyncio.get_running_loop()

    def ready() -> None:
        try:  # the kernels the compile chose, once they are compiled (servers/gpu/build.py)
            state.backend_info["gpu_server"]["build"].update(build.after_warmup(getattr(engine.driver, "ex", None)))
        except Exception as exc:  # noqa: BLE001 - a fact that cannot be read is recorded as such, never fatal
            state.backend_info["gpu_server"]["build"]["compile_cache"] = {"error": str(exc)[:200]}
        state.ready = True
        log.info(f"INFO:     Uvicorn running on http://{state.args.host}:{server.config.port} (Press CTRL+C to quit)")
        log.info("The server is fired up and ready to roll!")

    def fail(exc: BaseException) -> None:
        failed.append(exc)
        server.should_exit = True

    engine._on_ready = lambda: loop.call_soon_threadsafe(ready)
    engine._on_fail = lambda exc: loop.call_soon_threadsafe(fail, exc)
    build_request_models()
    engine.start()

    async def watch_workers() -> None:
        while True:
            await asyncio.sleep(0.5)
            for rank, p in enumerate(workers, start=1):
                if p.poll() is not None:
                    log.error(f"TP worker {rank} exited with code {p.returncode}")
                    fail(RuntimeError(f"TP worker {rank} exited"))
                    return

    watcher = asyncio.create_task(watch_workers())
    await serve_task
    watcher.cancel()
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_server_args(argv)
    _setup_logging(args.log_level, args.worker_rank)
    if args.worker_rank:
        return worker_main(args)
    try:
        shape = shapes.resolve(args.model_path)
    except shapes.ShapeError as exc:
        sys.stderr.write(f"python -m framework.servers.gpu: error: --model-path: {exc}\n")
        return 2
    seed = args.random_seed if args.random_seed is not None else int.from_bytes(os.urandom(4), "little")
    log.info("server_args=ServerArgs(" + ", ".join(
        f"{k}={('***' if k == 'api_key' and v else v)!r}" for k, v in args.model_dump().items()) + f", seed={seed})")
    device = torch.device(_device(args))
    spec = _spec(args)
    workers: list[subprocess.Popen] = []
    if args.tp_size > 1:
        workers, init = _spawn_workers(argv, args, seed)
        args = args.model_copy(update={"dist_init_method": init})

    def load() -> Driver:
        return Driver(build_executor(args, 0, seed), args.context_length)

    engine = GpuEngine(vocab=shape.vocab_size, context=args.context_length, max_rows=args.max_running_requests,
                       seed=seed, spec=spec, load=load, on_ready=lambda: None, on_fail=lambda exc: None,
                       prefill_tokens=args.chunked_prefill_size)
    if hf_weights.has_weights(args.model_path):  # text prompts become the real model's own tokens
        engine.tokenize = hf_weights.tokenizer(args.model_path)
    metrics = Metrics({"model_name": args.served_model_name or args.model_path}) if args.enable_metrics else None
    state = ServerState(args=args, engine=engine, seed=seed, backend_info=backend_info(args, spec, device),
                        metrics=metrics)
    config = uvicorn.Config(create_app(state), host=args.host, port=args.port, log_level="warning",
                            access_log=False, timeout_graceful_shutdown=2, lifespan="off", ws="none")
    server = uvicorn.Server(config)
    try:
        code = asyncio.run(_serve(state, server, engine, workers))
    finally:
        engine.stop()
        for p in workers:
            if p.poll() is None:
                p.terminate()
        for p in workers:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
        sys.stdout.flush()
    # the engine thread may be inside a CUDA call or a collective: leave without joining it
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
