"""The overlap scheduler: steps that feed themselves on the device give the tokens of one step at a time.

CPU, tiny shape, float64 (so a request's greedy tokens cannot depend on which others share its batch). The
executor's launch/collect pair is held to ``step``; the engine, with requests of different lengths arriving
while others decode (so the batch changes under a step in flight), is held to each request decoded alone.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

torch = pytest.importorskip("torch", reason="the GPU server needs torch (pip install -e '.[gpu]')")
pytestmark = pytest.mark.gpu  # the GPU server on the CPU (torch): its own tier, `pytest -m gpu`

from framework.servers.api.request import SimRequest  # noqa: E402
from framework.servers.gpu import shapes  # noqa: E402
from framework.servers.gpu.comm import TPGroup  # noqa: E402
from framework.servers.gpu.engine import Driver, GpuEngine  # noqa: E402
from framework.servers.gpu.executor import Executor  # noqa: E402

TINY = shapes.PRESETS["tiny"]
CONTEXT = 64


def _ex(*, overlap: bool, fused: bool = False, rows: int = 4) -> Executor:
    return Executor(TINY, seed=3, group=TPGroup(), dtype=torch.float64, context=CONTEXT, max_rows=rows,
                    fused=fused, compile_mode="none", overlap=overlap)


@pytest.mark.parametrize("fused", [False, True])
def test_launched_steps_feed_themselves_as_step_by_step_decode(fused):
    g = torch.Generator().manual_seed(11)
    prompts = [torch.randint(0, TINY.vocab_size, (n,), generator=g).tolist() for n in (5, 12, 3)]
    want, got = [], []
    for overlap, out in ((False, want), (True, got)):
        ex = _ex(overlap=overlap, fused=fused)
        tokens = ex.prefill_many(0, prompts)
        positions = [len(p) for p in prompts]
        if overlap:
            ex.set_batch(tokens, positions)
            inflight = ex.launch(3)
            for _ in range(5):  # the next step is queued before the last one is read
                nxt = ex.launch(3)
                out.append(ex.collect(inflight))
                inflight = nxt
            out.append(ex.collect(inflight))
        else:
            for _ in range(6):
                tokens = [t[0] for t in ex.step(tokens, positions)]
                positions = [p + 1 for p in positions]
                out.append(tokens)
    assert got == want
    assert len({tuple(col) for col in zip(*want, strict=True)}) == 3  # the rows really differ


def test_launch_is_refused_where_steps_cannot_feed_themselves():
    assert not Executor(TINY, seed=0, group=TPGroup(), dtype=torch.float64, context=32, max_rows=2,
                        draft_tokens=3, overlap=True).overlap
    with pytest.raises(RuntimeError, match="overlapped"):
        _ex(overlap=False).launch(1)


def _serve(overlap: bool, plan: list[tuple[list[int], int, int]]) -> dict[int, list[int]]:
    """Run the engine on ``plan`` = (prompt, max_new_tokens, submit after this many tokens of request 0)."""
    loop = asyncio.new_event_loop()
    ex = _ex(overlap=overlap, rows=3)  # 3 rows for 5 requests: some wait for a row
    ready = threading.Event()
    engine = GpuEngine(vocab=TINY.vocab_size, context=CONTEXT, max_rows=3, seed=1, spec=None,
                       load=lambda: Driver(ex, CONTEXT), on_ready=ready.set, on_fail=lambda exc: ready.set())
    engine.start()
    assert ready.wait(60)
    assert engine.overlap == overlap

    async def go() -> dict[int, list[int]]:
        reqs = [SimRequest(rid=str(i), prompt_tokens=len(p), max_new_tokens=n, stop=[], seed=i,
                           queue=asyncio.Queue(), loop=loop, prompt_ids=p) for i, (p, n, _) in enumerate(plan)]
        out: dict[int, list[int]] = {}
        pending = [i for i in range(len(plan))]
        engine.submit(reqs[0])
        pending.remove(0)
        seen0 = 0
        while True:
            for i in [i for i in pending if plan[i][2] <= seen0]:
                engine.submit(reqs[i])
                pending.remove(i)
            chunk = await asyncio.wait_for(reqs[0].queue.get(), 60) if 0 not in out else None
            if chunk is not None:
                seen0 = chunk.completion_tokens
                if chunk.finished:
                    out[0] = chunk.output_ids
                continue
            for i in pending:
                engine.submit(reqs[i])
            pending.clear()
            for i, r in enumerate(reqs[1:], start=1):
                while i not in out:
                    chunk = await asyncio.wait_for(r.queue.get(), 60)
                    if chunk.finished:
                        out[i] = chunk.output_ids
            return out

    try:
        return loop.run_until_complete(go())
    finally:
        engine.stop()
        engine.join(10)
        loop.close()


def test_the_engine_overlapped_streams_what_each_request_decoded_alone_streams():
    g = torch.Generator().manual_seed(5)
    lengths, outs, arrive = (4, 9, 6, 11, 2), (14, 3, 8, 5, 6), (0, 2, 2, 5, 9)
    plan = [(torch.randint(0, TINY.vocab_size, (n,), generator=g).tolist(), m, a)
            for n, m, a in zip(lengths, outs, arrive, strict=True)]
    alone = {i: _serve(False, [plan[i][:2] + (0,)])[0] for i in range(len(plan))}
    for overlap in (True, False):
        got = _serve(overlap, plan)
        assert got == alone, overlap
    assert [len(v) for _, v in sorted(alone.items())] == list(outs)
