"""``python -m framework.servers.gpu.check``: the executor's logits at any TP size, for comparison with TP1.

Each rank (one process per GPU, or per CPU process through gloo) prefills a seeded prompt, runs decode
steps and one verify pass through the same :class:`Executor` the server uses (eager, or CUDA graphs),
and rank 0 saves the logits and tokens it saw. Tests compare TP2 with TP1 on CPU; on GPUs it checks the
NCCL and symmetric-memory all-reduce against one GPU before anything is timed.
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import socket
import sys
import time

from framework.servers.gpu.comm import no_multicast_env

no_multicast_env()

import torch  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from framework.servers.gpu import comm, shapes  # noqa: E402
from framework.servers.gpu.executor import Executor  # noqa: E402


def run_rank(rank: int, opts: argparse.Namespace, init: str) -> None:
    t0 = time.perf_counter()

    def phase(what: str) -> None:
        if opts.verbose:
            print(f"[check rank {rank} +{time.perf_counter() - t0:.1f}s] {what}", flush=True)

    if opts.verbose:  # a hang prints every thread's stack, then exits
        faulthandler.dump_traceback_later(opts.verbose, exit=True)
    group = comm.init(rank, opts.tp_size, opts.device, init)
    phase(f"group {group.impl}")
    dtype = torch.float32 if opts.device == "cpu" else torch.bfloat16
    shape = shapes.resolve(opts.model_path)
    ex = Executor(shape, seed=opts.seed, group=group, dtype=dtype, context=64, max_rows=4)
    phase("weights")
    if opts.symm_mem:
        comm.enable_symm_mem(group, 4 * 4 * shape.hidden_size, dtype)
        phase("symmetric memory")
    if opts.graphs:
        ex.capture([1, 2, 4])
        phase("graphs captured")
    g = torch.Generator().manual_seed(opts.seed)
    prompt = torch.randint(0, shape.vocab_size, (12,), generator=g).tolist()
    with torch.inference_mode():
        tokens = torch.tensor([prompt], device=group.device)
        positions = torch.arange(12, device=group.device).unsqueeze(0)
        logits = ex.target(tokens, positions, ex.tcache, row0=0)
        firsts = [ex.prefill(r, prompt[: 8 + r]) for r in range(1, 3)]
        steps = [ex.step([firsts[0], firsts[1]], [9, 10])]
    phase("forward, prefill, step")
    if rank == 0:
        torch.save({"logits": logits.float().cpu(), "firsts": firsts, "steps": steps, "impl": group.impl},
                   opts.out)
    faulthandler.cancel_dump_traceback_later()
    phase("done")
    if group.impl in ("nccl", "symm_mem_one_shot"):
        # destroy_process_group hung after graph-captured NCCL work on the H200 machines (2026-11-30):
        # the results are saved, so leave without tearing the group down
        sys.stdout.flush()
        os._exit(0)
    comm.shutdown()


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m framework.servers.gpu.check")
    p.add_argument("--model-path", default="tiny")
    p.add_argument("--tp-size", type=int, default=1)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--symm-mem", action="store_true")
    p.add_argument("--graphs", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    p.add_argument("--verbose", type=float, default=0, metavar="TIMEOUT_S",
                   help="print each phase; dump every stack and exit after this many seconds")
    opts = p.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        init = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    if opts.tp_size == 1:
        run_rank(0, opts, init)
    else:
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        mp.spawn(run_rank, args=(opts, init), nprocs=opts.tp_size)


if __name__ == "__main__":
    main()
