"""The tensor-parallel group and its all-reduce: NCCL (gloo on CPU) or torch symmetric-memory one-shot.

One process per GPU. Rank 0 (the HTTP server) spawns ranks 1..tp-1; all join one process group over TCP
on 127.0.0.1, plus a gloo group for the scheduler's per-step command (as SGLang broadcasts its batch on
a CPU group). ``--enable-torch-symm-mem`` sums small activations with
``torch.ops.symm_mem.one_shot_all_reduce``: every rank reads every peer's buffer over NVLink in one
kernel. Multicast (NVLS) is never used: the server keeps ``NCCL_NVLS_ENABLE=0``,
``TORCH_SYMM_MEM_DISABLE_MULTICAST=1`` and ``NVSHMEM_DISABLE_NVLS=1`` set for itself and its workers.
Tensors larger than the symmetric buffer (prefill) go through NCCL.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

NO_MULTICAST_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def no_multicast_env() -> None:
    """Force NVLink multicast off in this process (and so in every process it starts)."""
    os.environ.update(NO_MULTICAST_ENV)


@dataclass
class TPGroup:
    rank: int = 0
    size: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    control: Any = None  # the gloo group for scheduler commands (None at TP1)
    impl: str = "none"   # none | nccl | gloo | symm_mem_one_shot
    _symm: list[torch.Tensor] = field(default_factory=list)
    _symm_flip: int = 0
    _group_name: str = ""

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        if self.size == 1:
            return x
        if self._symm and x.numel() <= self._symm[0].numel():
            # two buffers used in turn: a rank rewrites one only after the next all-reduce's start
            # barrier, i.e. after every peer has finished reading it
            buf = self._symm[self._symm_flip][: x.numel()]
            self._symm_flip ^= 1
            buf.copy_(x.reshape(-1))
            return torch.ops.symm_mem.one_shot_all_reduce(buf, "sum", self._group_name).view(x.shape)
        dist.all_reduce(x)
        return x

    def broadcast_command(self, cmd: torch.Tensor) -> None:
        """Rank 0's step command (a CPU int64 tensor) to every rank, over gloo."""
        if self.size > 1:
            dist.broadcast(cmd, src=0, group=self.control)


def init(rank: int, size: int, device_kind: str, init_method: str) -> TPGroup:
    """Join the TP group; on CUDA rank r takes GPU r of those visible."""
    if device_kind == "cuda":
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if size == 1:
        return TPGroup(0, 1, device)
    # one host: rendezvous and bootstrap over loopback (a VM's other interface may resolve but not connect)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
    backend = "nccl" if device.type == "cuda" else "gloo"
    kwargs: dict[str, Any] = {"device_id": device} if device.type == "cuda" else {}
    dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=size,
                            timeout=timedelta(seconds=300), **kwargs)
    control = dist.new_group(backend="gloo") if backend == "nccl" else dist.group.WORLD
    return TPGroup(rank, size, device, control, impl=backend)


def enable_symm_mem(group: TPGroup, numel: int, dtype: torch.dtype) -> None:
    """Allocate and rendezvous the two symmetric buffers one-shot all-reduce reads from (CUDA only)."""
    if group.size == 1:
        return
    if group.device.type != "cuda":
        raise RuntimeError("--enable-torch-symm-mem needs CUDA devices (symmetric memory is GPU memory)")
    import torch.distributed._symmetric_memory as symm_mem

    world = dist.group.WORLD
    name = world.group_name
    if hasattr(symm_mem, "enable_symm_mem_for_group"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            symm_mem.enable_symm_mem_for_group(name)
    bufs = []
    for _ in range(2):
        buf = symm_mem.empty(numel, dtype=dtype, device=group.device)
        symm_mem.rendezvous(buf, name)
        bufs.append(buf)
    group._symm, group._group_name, group.impl = bufs, name, "symm_mem_one_shot"


def shutdown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
