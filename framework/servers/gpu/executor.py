"""The model runner: target (and draft) model, their KV caches, and the steps the scheduler asks for.

Every rank of a TP group holds one ``Executor`` and runs the same steps in the same order. A step is
eager or, when CUDA graphs are on and the batch fits a captured size, the replay of a graph captured at
start-up for that batch size (the batch is padded up to it; padding rows are free cache rows). As in
SGLang, graphs cover decode and the speculative step, not prefill.

With ``fused`` (TP1 decode without speculation) the decode step runs through :class:`FusedDecoder`:
compiled per-layer pieces and a length-aware attention kernel, the same function as the reference forward.

With ``overlap`` (TP1 decode without speculation, SGLang's overlap scheduler) a decode step feeds itself on the
device: its last kernels write its greedy tokens into the next step's input and advance each live row's position,
so the engine launches step N+1 (:meth:`launch`) before it reads step N's tokens (:meth:`collect`) and streams
them while the device runs. Each step's tokens come back in one copy into one of two pinned buffers, waited for on
an event that releases the GIL. The host writes the inputs (:meth:`set_batch`) only when the batch changes.

The speculative step is EAGLE's chain (topk 1): the draft model proposes ``k - 1`` tokens one at a
time, then the target scores the last accepted token and the ``k - 1`` drafts in one verify pass of
``k`` tokens. Greedy argmax on real logits everywhere. With ``drafter="ngram"`` there is no draft model: the
engine proposes the ``k - 1`` drafts (:mod:`~framework.servers.gpu.ngram`) and the step is the verify pass alone.

``weights`` (a Hugging Face directory with safetensors) replaces the target's seeded random weights by real
ones (:mod:`~framework.servers.gpu.hf_weights`) before anything is compiled or captured.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, NamedTuple

import torch

from framework.servers.gpu.comm import TPGroup
from framework.servers.gpu.fused import FusedDecoder
from framework.servers.gpu.hf_weights import load_into
from framework.servers.gpu.model import Llama
from framework.servers.gpu.shapes import Shape, draft_shape

log = logging.getLogger("framework.servers.gpu")


def graph_batch_sizes(max_bs: int) -> list[int]:
    """SGLang's capture list shape: 1, 2, 4, 8, then every 8 up to ``max_bs`` (inclusive)."""
    sizes = [b for b in (1, 2, 4) if b <= max_bs] + list(range(8, max_bs + 1, 8))
    if max_bs not in sizes:
        sizes.append(max_bs)
    return sorted(set(sizes))


class Launched(NamedTuple):
    """A decode step on its way: which pinned buffer its tokens land in, and how many rows are real."""

    slot: int
    rows: int


class Executor:
    def __init__(self, shape: Shape, *, seed: int, group: TPGroup, dtype: torch.dtype, context: int,
                 max_rows: int, draft_tokens: int = 0, fused: bool = False,
                 compile_mode: str = "max-autotune-no-cudagraphs", overlap: bool = False,
                 batch1_gemv: str = "compiled", drafter: str = "model", weights: str | None = None) -> None:
        self.group, self.device, self.k = group, group.device, draft_tokens
        self.target = Llama(shape, seed=seed, tp_rank=group.rank, tp_size=group.size, device=self.device,
                            dtype=dtype, all_reduce=group.all_reduce, context=context, random_init=weights is None)
        self.weights_info = load_into(self.target, weights) if weights else None
        self.tcache = self.target.new_cache(max_rows)
        self.draft: Llama | None = None
        self.drafter = drafter
        if draft_tokens and drafter == "model":
            self.draft = Llama(draft_shape(shape), seed=seed + 1, device=self.device, dtype=dtype, context=context)
            self.dcache = self.draft.new_cache(max_rows)
        self.max_rows = max_rows
        width = max(1, draft_tokens)
        self.tok = torch.zeros((max_rows, width), dtype=torch.long, device=self.device)
        self.pos = torch.zeros((max_rows, 1), dtype=torch.long, device=self.device)
        # overlap: a step writes its tokens into ``tok`` and adds ``live`` (1 for a request's row, 0 for padding)
        # to ``pos``, so the next step needs nothing from the host while the batch stays the same
        self.overlap = overlap and not draft_tokens and group.size == 1
        self.live = torch.zeros((max_rows, 1), dtype=torch.long, device=self.device)
        cuda = self.device.type == "cuda"
        self._ring = [torch.zeros(max_rows, dtype=torch.long, pin_memory=cuda) for _ in range(2)]
        self._ring_done = [torch.cuda.Event() for _ in range(2)] if cuda else []
        self._slot = 0
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, tuple[torch.Tensor, ...]]] = {}
        self.fused: FusedDecoder | None = None
        self._pinned: dict[tuple[int, torch.Size], torch.Tensor] = {}
        self._done = torch.cuda.Event() if self.device.type == "cuda" else None
        if fused and not draft_tokens and group.size == 1:
            self.fused = FusedDecoder(self.target, compile_mode, batch1_gemv)

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
            nxt = self.fused.step(self.tok[:bs, 0], self.pos[:bs, 0], self.tcache)
        else:
            nxt = self.target(self.tok[:bs, :1], self.pos[:bs], self.tcache)[:, -1].argmax(-1)
        if self.overlap:  # the next step's inputs, on the device (inside the graph when there is one)
            self.tok[:bs, 0].copy_(nxt)
            self.pos[:bs].add_(self.live[:bs])
        return (nxt,)

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

    def _verify_fn(self, bs: int) -> tuple[torch.Tensor, ...]:
        """The n-gram step: the target scores the last token and the host's ``k - 1`` drafts (in ``tok``)."""
        positions = self.pos[:bs] + torch.arange(self.k, device=self.device).unsqueeze(0)
        return (self.target(self.tok[:bs, :self.k], positions, self.tcache).argmax(-1),)

    @property
    def _fn(self) -> Callable[[int], tuple[torch.Tensor, ...]]:
        if not self.k:
            return self._decode_fn
        return self._verify_fn if self.drafter == "ngram" else self._spec_fn

    @torch.inference_mode()
    def step(self, tokens: list[int], positions: list[int], drafts: list[list[int]] | None = None
             ) -> list[list[int]]:
        """One decode step (``[[next]] * B``), speculative step (``[drafts, verified]`` per request) or, with the
        n-gram drafter, verify pass of the given ``drafts`` (``k - 1`` per row; ``[verified]`` per request)."""
        B = len(tokens)
        bs = next((b for b in sorted(self.graphs) if b >= B), None)
        n = bs or B
        self.tok[:B, 0] = torch.tensor(tokens, dtype=torch.long, device=self.device)
        if self.drafter == "ngram" and self.k:
            if drafts is None or any(len(d) != self.k - 1 for d in drafts):
                raise ValueError(f"the n-gram step takes {self.k - 1} drafts per row")
            self.tok[:B, 1:self.k] = torch.tensor(drafts, dtype=torch.long, device=self.device)
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
        if self.drafter == "ngram":
            return host[0]
        return [d + v for d, v in zip(host[0], host[1], strict=False)]

    # ----------------------------------------------------------------- overlapped decode (TP1, no speculation)

    @torch.inference_mode()
    def set_batch(self, tokens: list[int], positions: list[int]) -> None:
        """The running batch's newest tokens and positions onto the device, once per change of the batch."""
        B = len(tokens)
        host = torch.tensor([tokens, positions], dtype=torch.long).to(self.device)  # one copy
        self.pos.zero_()  # padding rows stay at position 0 (a free cache row; nothing reads what they write)
        self.live.zero_()
        self.tok[:B, 0] = host[0]
        self.pos[:B, 0] = host[1]
        self.live[:B] = 1

    @torch.inference_mode()
    def launch(self, B: int) -> Launched:
        """Queue one decode step of the first ``B`` rows from the inputs on the device; returns at once on CUDA."""
        if not self.overlap:
            raise RuntimeError("launch() is the overlapped decode: TP1 without speculation, overlap on")
        bs = next((b for b in sorted(self.graphs) if b >= B), None)
        if bs is not None:
            graph, outs = self.graphs[bs]
            graph.replay()
        else:
            outs = self._decode_fn(B)
        slot = self._slot
        self._slot ^= 1
        self._ring[slot][:B].copy_(outs[0][:B], non_blocking=True)
        if self._ring_done:
            self._ring_done[slot].record()
        return Launched(slot, B)

    def collect(self, step: Launched) -> list[int]:
        """The tokens of a launched step (waits for it; the wait releases the GIL)."""
        if self._ring_done:
            self._ring_done[step.slot].synchronize()
        return self._ring[step.slot][:step.rows].tolist()

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

    # ----------------------------------------------------------------- compile warm-up and CUDA graphs

    @torch.inference_mode()
    def warm(self, sizes: list[int]) -> float:
        """Run the step once per batch size, eagerly, so that ``torch.compile`` and Triton build every kernel the
        step will need (the static batch-1 class and the dynamic one) now, not inside the first requests;
        seconds taken. Start-up calls it when no graphs are captured (capture warms the same way)."""
        t0 = time.perf_counter()
        for bs in sorted(b for b in sizes if b <= self.max_rows):
            self.pos[:bs] = 0
            self._fn(bs)
        self.pos.zero_()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter() - t0

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
