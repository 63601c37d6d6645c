"""Start-up warms the eager arm's compiled decode pieces before ``/health`` says ready (issue 32).

Without CUDA graphs the fused step used to compile inside its first requests (100 s each on a cold Inductor
cache against a 120 s request timeout). On the CPU nothing compiles, so these tests hold the decision
(``warmup_sizes``) and that ``Executor.warm`` runs the step at every size it is given, leaving the cache rows'
positions as it found them; the device run confirms the timing (docs/results/gpu/README.md).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the GPU server needs torch (pip install -e '.[gpu]')")
pytestmark = pytest.mark.gpu  # the GPU server on the CPU (torch): its own tier, `pytest -m gpu`

from framework.servers.gpu import shapes  # noqa: E402
from framework.servers.gpu.__main__ import warmup_sizes  # noqa: E402
from framework.servers.gpu.args import parse_server_args  # noqa: E402
from framework.servers.gpu.comm import TPGroup  # noqa: E402
from framework.servers.gpu.executor import Executor, graph_batch_sizes  # noqa: E402


def _args(*extra: str):
    return parse_server_args(["--model-path", "tiny", "--max-running-requests", "16", *extra])


def test_the_eager_arm_warms_every_captured_size_before_ready():
    eager = _args("--disable-cuda-graph")
    assert warmup_sizes(eager, "cuda", compiled=True) == graph_batch_sizes(16) == [1, 2, 4, 8, 16]


def test_no_warm_up_where_graphs_are_captured_or_nothing_compiles():
    assert warmup_sizes(_args(), "cuda", compiled=True) == []  # the capture runs each size twice first
    assert warmup_sizes(_args("--disable-cuda-graph"), "cuda", compiled=False) == []
    assert warmup_sizes(_args("--disable-cuda-graph"), "cpu", compiled=False) == []


def test_warm_runs_the_step_once_per_size_and_resets_positions():
    ex = Executor(shapes.PRESETS["tiny"], seed=5, group=TPGroup(), dtype=torch.float32, context=48, max_rows=4,
                  fused=True)
    seen: list[int] = []
    step = ex._decode_fn
    ex._decode_fn = lambda bs: (seen.append(bs), step(bs))[1]  # type: ignore[method-assign]
    took = ex.warm([4, 1, 2, 8])  # 8 is past max_rows: left out, as capture leaves it out
    assert seen == [1, 2, 4] and took >= 0
    assert int(ex.pos.abs().sum()) == 0
