"""``python -m framework.servers.sim``: start the simulated SGLang server (the imperative shell).

Order matters for launchers: the port is bound first (``/health`` answers 503), then the
simulated "weight loading" and "CUDA graph capture" take ``--sim-startup-s`` model seconds,
then ``/health`` answers 200 and the log says ``The server is fired up and ready to roll!``.
A configuration the profile cannot run (FlashInfer fusion on the CUDA 12.8 stack) dies during
start-up with a Python traceback and exit code 1, as SGLang did in the seed.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from typing import TextIO

import uvicorn

from framework.servers.api.args import resolved_server_args
from framework.servers.api.server import Metrics, ServerState, build_request_models, create_app
from framework.servers.sim import faults, model
from framework.servers.sim.args import SimServerArgs, build_parser, parse_server_args
from framework.servers.sim.engine import Engine
from framework.servers.sim.flags import ServerArgsError
from framework.servers.sim.info import sim_backend_info
from framework.servers.sim.profile import Profile, ProfileError, load_profile

log = logging.getLogger("sglang.sim")


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO), stream=sys.stdout,
        format="[%(asctime)s] %(message)s", datefmt="%Y-%m-%d %H:%M:%S", force=True,
    )


def _server_args_line(args: SimServerArgs, seed: int) -> str:
    fields = resolved_server_args(args, seed)
    return "server_args=ServerArgs(" + ", ".join(f"{k}={v!r}" for k, v in fields.items()) + ")"


def _crash_traceback(error: str) -> str:
    """What SGLang's scheduler prints when FlashInfer's fused all-reduce has no kernels for the GPU."""
    return (
        "Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "<site-packages>/sglang/srt/managers/scheduler.py", line 2913, in run_scheduler_process\n'
        "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)\n"
        '  File "<site-packages>/sglang/srt/model_executor/model_runner.py", line 398, in initialize\n'
        "    self.init_cuda_graphs()\n"
        '  File "<site-packages>/sglang/srt/layers/flashinfer_comm_fusion.py", line 78, in initialize\n'
        "    self.workspace_tensor = comm.trtllm_create_ipc_workspace_for_all_reduce_fusion(\n"
        '  File "<site-packages>/flashinfer/jit/core.py", line 201, in check_cuda_arch\n'
        "    raise RuntimeError(\n"
        f"{error}\n"
    )


async def _sleep_until(loop: asyncio.AbstractEventLoop, deadline: float) -> None:
    await asyncio.sleep(max(0.0, deadline - loop.time()))


async def _serve(state: ServerState, prof: Profile, server: uvicorn.Server, startup_s: float) -> int:
    """Bind, "load", then mark ready; returns the process exit code.

    The simulated loading phases end at fixed offsets from the bind (``startup_s`` model seconds in
    all), so one-off set-up done meanwhile (importing numpy and seeding the engine, building the
    request-body validators) does not add to it. Requests that need the engine are refused (503)
    until ready, as before.
    """
    serve_task = asyncio.create_task(server.serve())
    while not server.started:
        if serve_task.done():  # bind failed (uvicorn logged why)
            return 1
        await asyncio.sleep(0.005)
    loop = asyncio.get_running_loop()
    t_bind = loop.time()
    args = state.args
    tp = args.tp_size
    log.info("[TP0] Init torch distributed begin.")
    log.info("[TP0] Init torch distributed ends. mem usage=0.00 GB")
    log.info("[TP0] Load weight begin. avail mem=94.12 GB")
    failure = model.startup_failure(prof, args)
    if failure is not None:
        await asyncio.sleep(prof.crash_after_s / args.sim_speedup)
        for rank in range(tp):
            sys.stderr.write(f"[TP{rank}] " + _crash_traceback(failure))
        sys.stderr.write("Received sigquit from a child process. It usually means the child failed.\n")
        sys.stderr.flush()
        server.should_exit = True
        await serve_task
        return 1
    state.engine.start()  # imports numpy and seeds the generators: after the bind, inside the load time
    build_request_models()
    await _sleep_until(loop, t_bind + 0.6 * startup_s / args.sim_speedup)
    log.info("[TP0] Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, "
             "avail mem=14.93 GB, mem usage=79.19 GB.")
    log.info("[TP0] KV Cache is allocated. #tokens: 412352, KV size: 26.93 GB")
    if not args.disable_cuda_graph:
        bs = args.cuda_graph_max_bs or model.DEFAULT_CUDA_GRAPH_MAX_BS
        log.info("[TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=13.47 GB")
        log.info(f"[TP0] Capture cuda graph bs [1, 2, 4, 8, ..., {bs}]")
    await _sleep_until(loop, t_bind + startup_s / args.sim_speedup)
    if not args.disable_cuda_graph:
        log.info(f"[TP0] Capture cuda graph end. Time elapsed: {0.4 * startup_s:.2f} s. mem usage=1.12 GB. "
                 "avail mem=12.35 GB.")
    step = model.decode_step(prof, args, 1)
    log.info(f"[sim] profile={prof.name} allreduce={step.allreduce_impl} decode_step_ms={step.total_us / 1e3:.3f} "
             f"speedup={args.sim_speedup} noise_scale={args.sim_noise_scale}")
    log.info(f"INFO:     Uvicorn running on http://{args.host}:{server.config.port} (Press CTRL+C to quit)")
    await faults.before_ready(args.sim_faults)
    state.ready = True
    log.info("The server is fired up and ready to roll!")
    await serve_task
    return 0


CLOCK_GAVE_UP_EXIT = 3


def _exit_clock_gave_up(_why: str) -> None:
    """The engine logged ``sim_clock_gave_up: ...``: exit now, so the launch fails with that class instead of
    measuring figures that follow the wall clock (called from the engine or an HTTP thread)."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(CLOCK_GAVE_UP_EXIT)


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_server_args(sys.argv[1:] if argv is None else argv)
    except ServerArgsError as exc:  # SGLang dies in ServerArgs.__post_init__ with a traceback, exit 1
        sys.stderr.write("Traceback (most recent call last):\n"
                         '  File "<site-packages>/sglang/srt/server_args.py", in __post_init__\n'
                         f"ValueError: {exc}\n")
        return 1
    _setup_logging(args.log_level)
    for line in args.warnings:
        logging.getLogger("sglang.srt.server_args").warning(line)
    try:
        profile: Profile = load_profile(args.sim_profile)
    except ProfileError as exc:
        build_parser().error(f"--sim-profile: {exc}")
    seed = args.random_seed if args.random_seed is not None else int.from_bytes(os.urandom(4), "little")
    log.info(_server_args_line(args, seed))
    faults.crash_at_start(args.sim_faults)
    ground_truth: TextIO | None = open(args.sim_ground_truth, "a", encoding="utf-8") if args.sim_ground_truth else None
    engine = Engine(profile, args, seed, defer_random=True, on_clock_gave_up=_exit_clock_gave_up)
    metrics = Metrics({"model_name": args.served_model_name or args.model_path}) if args.enable_metrics else None
    state = ServerState(args=args, engine=engine, seed=seed, backend_info=sim_backend_info(profile, args),
                        ground_truth=ground_truth, metrics=metrics)
    app = faults.wrap(create_app(state), args.sim_faults, seed)
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level="warning", access_log=False,
                            timeout_graceful_shutdown=2, lifespan="off", ws="none")
    server = uvicorn.Server(config)
    startup_s = profile.startup_s if args.sim_startup_s is None else args.sim_startup_s
    try:
        code = asyncio.run(_serve(state, profile, server, startup_s))
    finally:
        engine.stop()
        if ground_truth is not None:
            ground_truth.close()
        sys.stdout.flush()
    return code


if __name__ == "__main__":
    sys.exit(main())
