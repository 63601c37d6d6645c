"""The model runner: target (and draft) model, their KV caches, and the steps the scheduler asks for.

Every rank of a TP group holds one ``Executor`` and runs the same steps in the same order. A step is
eager or, when CUDA graphs are on and the batch fits a captured size, the replay of a graph captured at
start-up for that batch size (the batch is padded up to it; padding rows are free cache rows). As in
SGLang, graphs cover decode and the speculative step, not prefill.

With ``fused`` (TP1 decode without speculation) the decode step runs through :class:`FusedDecoder`:
compiled per-layer pieces and a length-aware attention kernel, the same function as the reference forward.

The speculative step is EAGLE's chain (topk 1): the draft model proposes ``k - 1`` tokens one at a
time, then the target scores the last accepted token and the ``k - 1`` drafts in one verify pass of
``k`` tokens. Greedy argmax on real logits everywhere.
"""

from __future__ import annotations

import logging
import time
from typing import Callable

import torch

from framework.servers.gpu.comm import TPGroup
from framework.servers.gpu.fused import FusedDecoder
from framework.servers.gpu.model import Llama
from framework.servers.gpu.shapes import Shape, draft_shape

log = logging.getLogger("framework.servers.gpu")


def graph_batch_sizes(max_bs: int) -> list[int]:
    """SGLang's capture list shape: 1, 2, 4, 8, then every 8 up to ``max_bs`` (inclusive)."""
    sizes = [b for b in (1, 2, 4) if b <= max_bs] + list(range(8, max_bs + 1, 8))
    if max_bs not in sizes:
        sizes.append(max_bs)
    return sorted(set(sizes))


class Executor:
    def __init__(self, shape: Shape, *, seed: int, group: TPGroup, dtype: torch.dtype, context: int,
                 max_rows: int, draft_tokens: int = 0, fused: bool = False,
                 compile_mode: str = "max-autotune-no-cudagraphs") -> None:
        self.group, self.device, self.k = group, group.device, draft_tokens
        self.target = Llama(shape, seed=seed, tp_rank=group.rank, tp_size=group.size, device=self.device,
                            dtype=dtype, all_reduce=group.all_reduce, context=context)
        self.tcache = self.target.new_cache(max_rows)
        self.draft: Llama | None = None
        if draft_tokens:
            self.draft = Llama(draft_shape(shape), seed=seed + 1, device=self.device, dtype=dtype, context=context)
            self.dcache = self.draft.new_cache(max_rows)
        self.max_rows = max_rows
        width = max(1, draft_tokens)
        self.tok = torch.zeros((max_rows, width), dtype=torch.long, device=self.device)
        self.pos = torch.zeros((max_rows, 1), dtype=torch.long, device=self.device)
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, tuple[torch.Tensor, ...]]] = {}
        self.fused: FusedDecoder | None = None
        self._pinned: dict[tuple[int, torch.Size], torch.Tensor] = {}
        self._done = torch.cuda.Event() if self.device.type == "cuda" else None
        if fused and not draft_tokens and group.size == 1:
            self.fused = FusedDecoder(self.target, compile_mode)

    # ----------------------------------------------------------------- the steps

    @torch.inference_mode()
    def prefill(self, row: int, ids: list[int]) -> int:
        """Fill cache row ``row`` with the prompt; the first generated token."""
        tokens = torch.tensor([ids], dtype=torch.long, device=self.device)
        positions = torch.arange(len(ids), device=self.device).unsqueeze(0)
        logits = self.target(tokens, positions, self.tcache, row0=row, last_only=True)
        if self.draft is not None:
            self.draft(tokens, positions, self.dcache, row0=row, last_only=True)
        return int(logits[0, -1].argmax())

    @torch.inference_mode()
    def prefill_many(self, row0: int, prompts: list[list[int]]) -> list[int]:
        """Prompts into cache rows ``row0 ..`` in one padded forward; each row's first generated token.

        Padding continues each shorter row's positions, so it writes cache slots past that row's prompt,
        which its first decode step overwrites before anything attends to them (every read stops at the
        reader's own position)."""
        B, T = len(prompts), max(len(p) for p in prompts)
        tokens = torch.zeros((B, T), dtype=torch.long)
        for i, ids in enumerate(prompts):
            tokens[i, :len(ids)] = torch.tensor(ids, dtype=torch.long)
        tokens = tokens.to(self.device)
        positions = torch.arange(T, device=self.device).unsqueeze(0).expand(B, T)
        take = torch.tensor([len(p) - 1 for p in prompts], device=self.device)
        logits = self.target(tokens, positions, self.tcache, row0=row0, take=take)
        if self.draft is not None:
            self.draft(tokens, positions, self.dcache, row0=row0, take=take)
        return logits[:, 0].argmax(-1).tolist()

    def _decode_fn(self, bs: int) -> tuple[torch.Tensor, ...]:
        if self.fused is not None:
            return (self.fused.step(self.tok[:bs, 0], self.pos[:bs, 0], self.tcache),)
        logits = self.target(self.tok[:bs, :1], self.pos[:bs], self.tcache)
        return (logits[:, -1].argmax(-1),)

    def _spec_fn(self, bs: int) -> tuple[torch.Tensor, ...]:
        assert self.draft is not None
        x, p = self.tok[:bs, :1], self.pos[:bs]
        drafts = []
        for j in range(self.k - 1):
            x = self.draft(x, p + j, self.dcache).argmax(-1)
            drafts.append(x)
        seq = torch.cat([self.tok[:bs, :1], *drafts], dim=1)
        positions = p + torch.arange(self.k, device=self.device).unsqueeze(0)
        verified = self.target(seq, positions, self.tcache).argmax(-1)
        return torch.cat(drafts, dim=1), verified

    @property
    def _fn(self) -> Callable[[int], tuple[torch.Tensor, ...]]:
        return self._spec_fn if self.k else self._decode_fn

    @torch.inference_mode()
    def step(self, tokens: list[int], positions: list[int]) -> list[list[int]]:
        """One decode step (``[[next]] * B``) or speculative step (``[drafts, verified]`` per request)."""
        B = len(tokens)
        bs = next((b for b in sorted(self.graphs) if b >= B), None)
        n = bs or B
        self.tok[:B, 0] = torch.tensor(tokens, dtype=torch.long, device=self.device)
        self.pos[:B, 0] = torch.tensor(positions, dtype=torch.long, device=self.device)
        if n > B:
            self.pos[B:n] = 0
        if bs is not None:
            graph, outs = self.graphs[bs]
            graph.replay()
        else:
            outs = self._fn(B)
        host = [o[:B].tolist() for o in self._to_host(outs, B)]
        if not self.k:
            return [[t] for t in host[0]]
        return [d + v for d, v in zip(host[0], host[1], strict=False)]

    def _to_host(self, outs: tuple[torch.Tensor, ...], B: int) -> list[torch.Tensor]:
        """The step's outputs on the host. On CUDA: copied into pinned buffers, then waited for on an event, which
        releases the GIL, so the HTTP thread streams the previous step's tokens while this one runs."""
        if self.device.type != "cuda":
            return [o[:B] for o in outs]
        host = []
        for i, o in enumerate(outs):
            buf = self._pinned.get((i, o.shape[1:]))
            if buf is None or buf.shape[0] < B:
                buf = self._pinned[(i, o.shape[1:])] = torch.empty((self.max_rows, *o.shape[1:]), dtype=o.dtype,
                                                                   pin_memory=True)
            buf[:B].copy_(o[:B], non_blocking=True)
            host.append(buf[:B])
        self._done.record()
        self._done.synchronize()
        return host

    def move_row(self, src: int, dst: int) -> None:
        self.tcache.move_row(src, dst)
        if self.draft is not None:
            self.dcache.move_row(src, dst)

    # ----------------------------------------------------------------- CUDA graphs

    @torch.inference_mode()
    def capture(self, sizes: list[int]) -> float:
        """Capture one graph per batch size (largest first, sharing one memory pool); seconds taken."""
        t0 = time.perf_counter()
        pool = torch.cuda.graph_pool_handle()
        stream = torch.cuda.Stream(device=self.device)
        for bs in sorted((b for b in sizes if b <= self.max_rows), reverse=True):
            self.pos[:bs] = 0
            stream.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(stream):
                for _ in range(2):
                    self._fn(bs)
            torch.cuda.current_stream(self.device).wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool, stream=stream):
                outs = self._fn(bs)
            self.graphs[bs] = (graph, outs)
        torch.cuda.synchronize(self.device)
        return time.perf_counter() - t0
