"""A fitted twin on the sim: it serves llama.cpp's flags, serves exactly what it predicts, refuses what it does
not model, and a fit on pilots it generated recovers its known parameters within their intervals (seeded)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from cli_helpers import ROOT, framework

from framework.analysis import twinfit
from framework.core.twin import MetricNoise, TwinConfig, blank
from framework.servers.sim.adapter import twin_predict

pytestmark = pytest.mark.e2e  # whole runs on the sim (about a minute): the e2e tier (.ci/run: pytest -m e2e)

KNOWN = {"decode_step_us": 2000.0, "prefill_base_us": 15000.0, "prefill_us_per_token": 300.0, "thread_exponent": 0.5}
PILOT = """\
name: twin_pilot
statement: a pilot of a known twin
rationale: the fit must recover the twin's parameters
experiment: tiny_llama_cpu
metric: decode_tok_s
factors:
  threads:
    reference: one
    levels:
      one: {server_args: [--n_threads, "1"]}
      two: {server_args: [--n_threads, "2"]}
  streams:
    reference: c1
    levels:
      c1: {workload: {concurrency: 1}}
      c2: {workload: {concurrency: 2}}
  prompt:
    reference: short
    levels:
      short: {workload: {prompt_tokens: 16}}
      long: {workload: {prompt_tokens: 64}}
predictions:
  - {id: two_threads_faster, kind: increase, factor: threads, level: two, where: {streams: c1, prompt: short}}
design: {launches: 3, requests: 4, warmup: 1, seed: 20261201}
"""


def _known(noise: float) -> dict:
    fit = blank("llamacpp", "known", reference_threads=1).with_values(KNOWN)
    params = {k: p.model_copy(update={"identifiable": k in KNOWN}) for k, p in fit.parameters.items()}
    nz = MetricNoise(launch_log_sd=noise, request_log_sd=noise, residual_log_sd=noise, residual_df=10, launches=1,
                     requests=1)
    return fit.model_copy(update={"parameters": params, "noise": {"tpot_s": nz, "ttft_s": nz}}).model_dump(mode="json")


def _workdir(workdir: Path, noise: float) -> Path:
    for sub in ("hypotheses", "experiments"):
        (workdir / sub).mkdir(exist_ok=True)
    (workdir / "experiments" / "tiny_llama_cpu.yaml").write_text(
        (ROOT / "experiments" / "tiny_llama_cpu.yaml").read_text())
    (workdir / "hypotheses" / "twin_pilot.yaml").write_text(PILOT)
    profile = workdir / "known.yaml"
    profile.write_text(yaml.safe_dump(_known(noise)))
    return profile


def _trials(workdir: Path) -> list[dict]:
    run = json.loads((workdir / "verdicts.jsonl").read_text().splitlines()[-1])["run_dir"]
    return [json.loads(line) for line in (Path(run) / "trials.jsonl").read_text().splitlines()]


def test_a_fit_on_its_own_pilot_recovers_the_twins_parameters(workdir: Path) -> None:
    profile = _workdir(workdir, noise=0.03)
    p = framework("run", "hypothesis=twin_pilot", "backend=sim", f"sim_profile={profile}", "progress=false",
                  "report=false", cwd=workdir, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    launches = twinfit.launches_from_rows(_trials(workdir), "llamacpp")
    assert len(launches) == 24 and launches[0].config.flags[:2] == ["--n_ctx", "256"]
    fit = twinfit.fit(launches, twin_predict, engine="llamacpp", reference_threads=1)
    ident = {n for n, q in fit.parameters.items() if q.identifiable}
    assert ident == set(KNOWN)
    for name, true in KNOWN.items():
        q = fit.parameters[name]
        assert abs(q.estimate - true) <= 1.96 * q.se, (name, q.estimate, q.se, true)  # its 95% interval
    # the noise it put in (3% per launch and per request, log scale) is what the fit reads back, roughly
    assert 0.015 < fit.noise["tpot_s"].request_log_sd < 0.06


def test_the_twin_serves_what_it_predicts_and_its_record_carries_the_intervals(workdir: Path) -> None:
    profile = _workdir(workdir, noise=0.03)  # the intervals' noise; the run switches the sim's noise off
    p = framework("run", "hypothesis=twin_pilot", "backend=sim", f"sim_profile={profile}", "backend.noise_scale=0",
                  "design.launches=1", "progress=false", "report=false", cwd=workdir, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    rec = json.loads((workdir / "verdicts.jsonl").read_text().splitlines()[-1])
    fit = blank("llamacpp", "known", reference_threads=1).with_values(KNOWN)
    for launch in twinfit.launches_from_rows(_trials(workdir), "llamacpp"):
        want = twin_predict(fit, launch.config)
        for m in ("ttft_s", "tpot_s"):
            assert math.isclose(launch.mean(m), want[m], rel_tol=1e-6), (launch.launch_id, m)
    twin = rec["analysis"]["twin_predictions"]
    assert len(twin) == len(rec["conditions"]) == 8
    for cond, by_metric in twin.items():
        for m, iv in by_metric.items():
            assert iv["low"] < iv["mean"] < iv["high"], (cond, m)
            assert 0.02 < math.log(iv["high"] / iv["mean"]) < 0.2, (cond, m)  # its 3% noise, t quantile


def test_a_varied_llamacpp_flag_the_twin_does_not_model_is_refused(workdir: Path) -> None:
    profile = _workdir(workdir, noise=0.0)
    text = PILOT.replace('{server_args: [--n_threads, "1"]}', '{server_args: [--flash_attn, "False"]}').replace(
        '{server_args: [--n_threads, "2"]}', '{server_args: [--flash_attn, "True"]}')
    (workdir / "hypotheses" / "twin_pilot.yaml").write_text(text)
    p = framework("run", "hypothesis=twin_pilot", "backend=sim", f"sim_profile={profile}", cwd=workdir)
    assert p.returncode == 2
    assert "--flash_attn (not modelled by the llamacpp twin)" in p.stderr and "Traceback" not in p.stderr
    assert not (workdir / "outputs").exists()


def test_a_twin_of_llamacpp_queues_streams_on_its_one_slot() -> None:
    fit = blank("llamacpp", reference_threads=1).with_values(KNOWN)
    one = TwinConfig(engine="llamacpp", flags=["--n_threads", "2"], concurrency=1, prompt_tokens=32, output_tokens=64)
    three = one.model_copy(update={"concurrency": 3})
    a, b = twin_predict(fit, one), twin_predict(fit, three)
    assert math.isclose(a["tpot_s"], b["tpot_s"], rel_tol=1e-9)  # never batched
    assert b["ttft_s"] > 2 * a["ttft_s"]  # each waits for the streams ahead of it
    assert math.isclose(a["tpot_s"], KNOWN["decode_step_us"] * 2 ** -0.5 / 1e6, rel_tol=1e-9)


def test_plan_with_a_twin_says_launches_and_expected_refutations(workdir: Path) -> None:
    profile = _workdir(workdir, noise=0.03)
    text = PILOT.replace("kind: increase", "kind: decrease")  # two threads are faster: a decrease is refuted
    (workdir / "hypotheses" / "twin_pilot.yaml").write_text(text)
    p = framework("plan", "hypothesis=twin_pilot", "backend=sim", f"sim_profile={profile}", cwd=workdir)
    assert p.returncode == 0, p.stderr
    out = " ".join(p.stdout.split())
    assert "assumptions from the twin" in out and "no probe" in out
    assert "the twin already expects twin_pilot to be refuted on this deployment: two_threads_faster" in out
    assert not (workdir / "outputs").exists()  # nothing launched
