"""A twin of the project's GPU server: it reads the server's flags (slots, context, CUDA graphs on and off, the
largest captured batch), charges a decode step without a graph its eager cost, and a fit on launches of a known
GPU twin over the validation's pilot recovers that cost (seeded synthetic launches; no server runs)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from framework.analysis import twinfit
from framework.core.twin import TwinConfig, blank
from framework.servers.sim import engines
from framework.servers.sim.adapter import twin_predict

ROOT = Path(__file__).resolve().parents[3]
KNOWN = {"decode_step_us": 1200.0, "decode_us_per_token": 40.0, "prefill_base_us": 6000.0,
         "prefill_us_per_token": 12.0, "eager_step_us": 2500.0}
BASE = ["--context-length", "512", "--max-running-requests", "16", "--cuda-graph-max-bs", "16",
        "--torch-compile-mode", "none"]


def _config(flags: list[str], c: int, p: int, o: int) -> TwinConfig:
    return TwinConfig(engine="gpu", flags=[*BASE, *flags], concurrency=c, prompt_tokens=p, output_tokens=o,
                      requests=4, warmup=1)  # the pilot runs 16 + 2; 4 + 1 keeps the replays quick


def _pilot_configs() -> list[TwinConfig]:
    """The configurations of benchmarks/twin/gpu_pilot.yaml, read from the file (graphs x shape)."""
    h = yaml.safe_load((ROOT / "benchmarks" / "twin" / "gpu_pilot.yaml").read_text())
    out = []
    for graphs in h["factors"]["graphs"]["levels"].values():
        for shape in h["factors"]["shape"]["levels"].values():
            w = shape["workload"]
            out.append(_config(list((graphs or {}).get("server_args", [])), w["concurrency"], w["prompt_tokens"],
                               w["output_tokens"]))
    return out


def test_the_gpu_servers_flags_set_slots_context_and_when_a_step_is_eager() -> None:
    _, theirs = engines.split([*BASE, "--disable-cuda-graph"], "gpu", set())
    es = engines.settings("gpu", theirs)
    assert es.slots == 16 and es.context == 512 and es.eager and es.graph_max_bs == 16
    assert es.not_modelled == {"--torch-compile-mode": "none"}  # listed, accepted while every condition sets it alike
    assert engines.eager_decode(es, 1)
    graphs = engines.settings("gpu", engines.split(["--cuda-graph-max-bs", "4"], "gpu", set())[1])
    assert not engines.eager_decode(graphs, 4) and engines.eager_decode(graphs, 5)  # above the largest graph
    assert not engines.eager_decode(engines.settings("vllm", []), 1)  # no other engine's steps are eager
    es16 = engines.settings("gpu", engines.split(BASE, "gpu", set())[1])
    assert [engines.graph_rows(es16, b) for b in (1, 3, 5, 6, 8, 9, 16)] == [1, 4, 8, 8, 8, 16, 16]  # padded
    assert engines.graph_rows(es, 6) == 6 and engines.graph_rows(engines.settings("vllm", []), 6) == 6


def test_a_graph_pads_the_batch_to_its_captured_size() -> None:
    fit = blank("gpu").with_values(KNOWN)
    at = {c: twin_predict(fit, _config([], c, 32, 32))["tpot_s"] for c in (6, 8)}
    assert at[6] == pytest.approx(at[8], rel=1e-9)  # batch 6 replays the graph of 8
    eager = {c: twin_predict(fit, _config(["--disable-cuda-graph"], c, 32, 32))["tpot_s"] for c in (6, 8)}
    assert eager[8] - eager[6] == pytest.approx(2 * KNOWN["decode_us_per_token"] * 1e-6, rel=1e-6)


def test_a_step_without_a_graph_costs_the_eager_step_more() -> None:
    fit = blank("gpu").with_values(KNOWN)
    on = twin_predict(fit, _config([], 1, 32, 32))
    off = twin_predict(fit, _config(["--disable-cuda-graph"], 1, 32, 32))
    assert off["tpot_s"] - on["tpot_s"] == pytest.approx(KNOWN["eager_step_us"] * 1e-6, rel=1e-6)
    assert off["ttft_s"] == pytest.approx(on["ttft_s"])  # prefill runs without graphs either way


def test_the_argv_of_a_gpu_server_launch_gives_the_twin_its_engine_flags() -> None:
    argv = ["/usr/bin/python3", "-m", "framework.servers.gpu", "--model-path", "llama-1b", "--tp-size", "1", "--host",
            "127.0.0.1", "--port", "5000", "--random-seed", "7", *BASE, "--disable-cuda-graph"]
    assert twinfit._engine_flags(argv) == [*BASE, "--disable-cuda-graph"]


@pytest.mark.e2e  # eight configurations replayed at every step of the fit: 10-20 s, too slow for the default run
def test_a_fit_on_the_validation_pilot_recovers_a_known_gpu_twin() -> None:
    rng = np.random.default_rng(35)
    truth = blank("gpu").with_values(KNOWN)
    launches = []
    for k, config in enumerate(_pilot_configs()):
        mean = twin_predict(truth, config)
        shift = rng.normal(0, 0.01)
        values = {m: [mean[m] * math.exp(shift + rng.normal(0, 0.01)) for _ in range(4)] for m in ("ttft_s", "tpot_s")}
        launches.append(twinfit.Launch(f"c{k}", f"c{k}", config, values))
    fit = twinfit.fit(launches, twin_predict, engine="gpu")
    identified = {n for n, p in fit.parameters.items() if p.identifiable}
    assert identified == set(KNOWN)
    for name, value in KNOWN.items():
        p = fit.parameters[name]
        assert abs(p.estimate - value) <= 4 * p.se + 1e-9, (name, p.estimate, p.se, value)
    assert fit.domain is not None and fit.domain.concurrency == (1, 8) and len(fit.domain.flags) == 2


def test_the_gpu_servers_speculative_flags_reach_the_twins_verify_step() -> None:
    """NGRAM on the GPU server (SGLang's spelling) is a verify step of K tokens with the spec overhead: a twin whose
    overhead is 0 and one whose overhead is 5 ms predict different TPOTs (they predicted the same before: the flags
    went to the engine's table as not modelled), and the flags are not listed as not modelled."""
    spec = ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "4"]
    config = _config(spec, 1, 64, 32)
    values = {**KNOWN, "accept_length": 2.0}
    base = blank("gpu", "t", None).with_values({**values, "spec_overhead_us": 0.0})
    slow = base.with_values({"spec_overhead_us": 5000.0})
    fast_tpot, slow_tpot = twin_predict(base, config)["tpot_s"], twin_predict(slow, config)["tpot_s"]
    assert slow_tpot > fast_tpot * 1.5
    plain = twin_predict(base, _config([], 1, 64, 32))["tpot_s"]
    # a verify step of 4 tokens (d0 + 3 d1) emits 2 tokens on average: about half the plain step's TPOT
    assert math.isclose(fast_tpot, (KNOWN["decode_step_us"] + 3 * KNOWN["decode_us_per_token"]) / 2e6, rel_tol=0.1)
    assert fast_tpot < plain
    from framework.servers.sim.twin import engine_summary
    assert not set(engine_summary(base, config)["not_modelled"]) & engines.SIM_SPEC_FLAGS["gpu"]
