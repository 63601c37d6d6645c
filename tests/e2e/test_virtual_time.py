"""Virtual time: with the same seed the sim serves the same figures at any speed-up and any machine load.

Each case runs once at speed-up 1 and once at 20, with a CPU-burning process beside it, through real sim
processes and HTTP, and compares every request's figures on the model clock (exactly, to the ns). The
arrivals come from the client's loop (servers/sim/arrivals.py), not from when a request reached the
server, so a loaded machine can only make a run slower.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from cli_helpers import ROOT, framework, ledger_records

from framework.core.spec import Workload
from framework.execution.client import run_workload
from framework.execution.launcher import ServerProcess, ServerSpec, free_port

pytestmark = [pytest.mark.slow, pytest.mark.e2e]  # speed-up 1 is real time: the e2e tier

FIGURES = ("ttft_s", "tpot_s", "e2e_s", "decode_tok_s", "model_start_s", "sim_mean_batch")


@pytest.fixture
def busy() -> Iterator[None]:
    """A process spinning on a core beside the run for its whole length."""
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        proc.kill()
        proc.wait()


def served(workload: Workload, speedup: float, requests_n: int, workdir: Path) -> list[tuple]:
    """Every request's figures on the model clock, by plan index, from one seeded sim at ``speedup``."""
    port = free_port()
    argv = [sys.executable, "-m", "framework.servers.sim", "--model-path", "m", "--tp-size", "8", "--port",
            str(port), "--sim-speedup", str(speedup), "--random-seed", "5", "--sim-startup-s", "0"]
    rows: dict[int, dict] = {}
    with ServerProcess(ServerSpec(argv, "127.0.0.1", port, workdir / f"sim-{port}.log", ready_timeout_s=60)) as srv:
        run_workload(srv.spec.base_url, workload, requests_n=requests_n, warmup=2, seed=11, time_scale=speedup,
                     on_row=lambda i, _unanalysed, row: rows.__setitem__(i, row))
    # cool-down requests are not measured; the client cancels those in flight when the window ends (wall time)
    ok = {i: r for i, r in rows.items() if r["ok"] and r["phase"] != "cooldown"}
    assert len(ok) >= requests_n and all(r["clock"] == "sim_model" for r in ok.values())
    return [(i, *(r.get(k) for k in FIGURES)) for i, r in sorted(ok.items())]


@pytest.mark.parametrize("mode,streams", [("closed", 16), ("closed", 64), ("open", 16), ("open", 64)])
def test_the_same_seed_serves_the_same_figures_at_speedup_1_and_20_under_load(tmp_path, busy, mode, streams):
    if mode == "closed":
        workload = Workload(prompt_tokens=64, output_tokens=10, concurrency=streams)
    else:  # arrivals faster than the server drains them: the cap on requests in flight binds too
        workload = Workload(prompt_tokens=64, output_tokens=10, request_rate=40.0 * streams,
                            max_concurrency=streams)
    n = streams + 4  # past one round: successors arrive while other streams still decode
    slow, fast = served(workload, 1, n, tmp_path), served(workload, 20, n, tmp_path)
    assert slow == fast


HYPOTHESIS = {
    "name": "ttft_under_load", "statement": "At 16 streams TTFT grows at least 1.5x from 64- to 256-token prompts",
    "experiment": "rtx_pro_6000_tp8", "metric": "ttft_s",
    "factors": {"prompt": {"reference": "short", "levels": {
        "short": {"workload": {"prompt_tokens": 64, "output_tokens": 8, "concurrency": 16}},
        "long": {"workload": {"prompt_tokens": 256, "output_tokens": 8, "concurrency": 16}}}}},
    "predictions": [{"id": "grows", "kind": "increase", "factor": "prompt", "level": "long", "min_effect": 0.5}],
    "design": {"launches": 2, "requests": 16, "warmup": 1, "seed": 5},
}


@pytest.mark.e2e
def test_a_16_stream_hypothesis_gives_the_same_estimates_at_speedup_1_and_20_under_load(workdir, busy):
    (workdir / "hypotheses").mkdir()
    (workdir / "hypotheses" / "ttft_under_load.yaml").write_text(yaml.safe_dump(HYPOTHESIS, sort_keys=False))
    runs = []
    for speedup in (1, 20):
        run_dir = workdir / f"run-{speedup}"
        out = framework("run", "hypothesis=ttft_under_load", f"paths.hypotheses={workdir / 'hypotheses'}",
                        f"paths.experiments={ROOT / 'experiments'}", f"backend.speedup={speedup}",
                        "backend.extra_args=[--sim-startup-s,'0']",
                        f"hydra.run.dir={run_dir}", cwd=workdir)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        (pred,) = ledger_records(workdir / "verdicts.jsonl")[-1]["predictions"]
        rows = [json.loads(line) for line in (run_dir / "trials.jsonl").read_text().splitlines()]
        requests = [r for r in rows if r.get("kind") == "request" and r.get("phase") == "measured"]
        launch = {lid: n for n, lid in enumerate(dict.fromkeys(r["launch_id"] for r in requests))}  # ids differ
        figures = sorted((r["condition"], launch[r["launch_id"]], r["index"], *(r.get(k) for k in FIGURES))
                         for r in requests)
        runs.append(((pred["verdict"], pred["estimate"], pred["ci"]), figures))
    assert runs[0] == runs[1]
    assert len(runs[0][1]) >= 2 * 2 * 16
