"""The seed's four figures, at real speed, through the framework's launcher and HTTP client.

The simulator's noise is switched off (`--sim-noise-scale 0`) so the check is of the mean model
plus the measurement path, not of a random draw; the noise itself is tested in tests/servers/sim.
"""

from __future__ import annotations

import sys

import pytest

from framework.core.spec import Workload
from framework.execution.client import run_workload
from framework.execution.launcher import ServerProcess, ServerSpec, free_port

pytestmark = pytest.mark.e2e  # the sim at real speed, 3-6 s a case: the e2e tier

EAGLE3 = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
          "--speculative-num-draft-tokens", "4"]
FUSION = ["--enable-flashinfer-allreduce-fusion"]
SEED = [("baseline", [], 92.6), ("baseline+fusion", FUSION, 92.7), ("eagle3", EAGLE3, 54.1),
        ("eagle3+fusion", EAGLE3 + FUSION, 96.1)]


@pytest.mark.slow
@pytest.mark.parametrize("name,flags,expected", SEED, ids=[s[0] for s in SEED])
def test_seed_figures_at_real_speed_within_2_percent(tmp_path, name, flags, expected):
    port = free_port()
    argv = [sys.executable, "-m", "framework.servers.sim", "--model-path", "m", "--tp-size", "8", "--port", str(port),
            "--sim-noise-scale", "0", "--sim-startup-s", "0", *flags]
    rows: list[dict] = []
    with ServerProcess(ServerSpec(argv, "127.0.0.1", port, tmp_path / "sim.log", ready_timeout_s=60)) as server:
        run_workload(server.spec.base_url, Workload(prompt_tokens=128, output_tokens=256), requests_n=1, warmup=0,
                     seed=1, on_row=lambda i, w, row: rows.append(row))
    (row,) = rows
    assert row["ok"] and row["completion_tokens"] == 256
    assert row["decode_tok_s"] == pytest.approx(expected, rel=0.02), f"{name}: {row['decode_tok_s']:.2f} tok/s"
