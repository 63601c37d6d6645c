"""Batched prefill: prompts of different lengths in one padded forward give what one-at-a-time prefill gives."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the GPU server needs torch (pip install -e '.[gpu]')")
pytestmark = pytest.mark.gpu  # the GPU server on the CPU (torch): its own tier, `pytest -m gpu`

from framework.servers.gpu import shapes  # noqa: E402
from framework.servers.gpu.comm import TPGroup  # noqa: E402
from framework.servers.gpu.executor import Executor  # noqa: E402

TINY = shapes.PRESETS["tiny"]


def _ex(draft: int = 0) -> Executor:
    return Executor(TINY, seed=9, group=TPGroup(), dtype=torch.float32, context=48, max_rows=5, draft_tokens=draft)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_one_padded_forward_equals_prompts_one_at_a_time(seed):
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(0, TINY.vocab_size, (n,), generator=g).tolist()
               for n in torch.randint(1, 20, (4,), generator=g).tolist()]
    one, many = _ex(), _ex()
    firsts = [one.prefill(1 + r, ids) for r, ids in enumerate(prompts)]
    assert many.prefill_many(1, prompts) == firsts
    for a, b in zip(one.tcache.k + one.tcache.v, many.tcache.k + many.tcache.v, strict=True):
        for r, ids in enumerate(prompts):  # each row's prompt slots; padding past them is never read
            assert torch.allclose(a[1 + r, :, :len(ids)], b[1 + r, :, :len(ids)], atol=1e-5)
    positions = [len(p) for p in prompts]
    for ex in (one, many):
        ex.prefill(0, [3, 4, 5])
    steps = [ex.step([7, *firsts], [3, *positions]) for ex in (one, many)]
    assert steps[0] == steps[1]


def test_the_draft_cache_is_prefilled_in_the_same_forward():
    one, many = _ex(draft=3), _ex(draft=3)
    prompts = [[1, 2, 3, 4, 5], [6, 7], [8, 9, 10]]
    firsts = [one.prefill(r, ids) for r, ids in enumerate(prompts)]
    assert many.prefill_many(0, prompts) == firsts
    assert one.step(firsts, [5, 2, 3]) == many.step(firsts, [5, 2, 3])
