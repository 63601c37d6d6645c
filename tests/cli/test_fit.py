"""`python -m framework fit`: the shipped llama.cpp pilot fits (no llama.cpp needed), bad input is one line, exit 2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from cli_helpers import ROOT, framework

from framework.core.twin import TwinFit

PILOT = ROOT / "docs" / "results" / "twin" / "pilot_llamacpp"


def test_fit_on_the_shipped_llamacpp_pilot(workdir: Path) -> None:
    out = workdir / "twin.yaml"
    p = framework("fit", f"pilot={PILOT}", f"out={out}", cwd=workdir, timeout=300)
    assert p.returncode == 0, p.stderr
    fit = TwinFit.model_validate(yaml.safe_load(out.read_text()))
    assert fit.engine == "llamacpp" and fit.configs_fitted == 8 and fit.reference_threads == 1
    ident = {n for n, q in fit.parameters.items() if q.identifiable}
    # the pilot varied threads, streams (on a one-slot server) and prompt length: nothing else
    assert ident == {"decode_step_us", "prefill_base_us", "prefill_us_per_token", "thread_exponent"}
    for name, q in fit.parameters.items():
        if name in ident:
            assert q.estimate is not None and q.se is not None and 0 < q.se < abs(q.estimate)
        else:
            assert q.estimate is None and q.reason and q.needs  # marked, never silently set
    assert set(fit.covariance) == ident
    assert fit.noise["tpot_s"].launch_log_sd is not None and fit.noise["tpot_s"].request_log_sd is not None
    assert "decode_us_per_token" in p.stdout and "sim_profile=" in p.stdout
    # the pilot's settings are the twin's domain; its host and CPU are recorded (its load was not, then)
    assert fit.domain is not None and fit.domain.concurrency[0] >= 1 and len(fit.domain.flags) >= 2
    assert fit.pilot_host["host"] and fit.pilot_host["launches_with_load"] == 0
    assert "load average not recorded" in " ".join(p.stdout.split())
    assert "domain (predictions outside it are marked as extrapolations): streams" in " ".join(p.stdout.split())


def test_fit_refuses_bad_input_in_one_line(workdir: Path) -> None:
    (workdir / "empty").mkdir()
    launches_only = workdir / "launches_only"
    launches_only.mkdir()
    rows = [json.loads(line) for line in (PILOT / "trials.jsonl").read_text().splitlines()]
    (launches_only / "trials.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows if r["kind"] != "request"))
    out = f"out={workdir / 'twin.yaml'}"
    for args, says in (((f"pilot={workdir / 'nope'}", out), "no such run directory"),
                       ((f"pilot={workdir / 'empty'}", out), "no trials.jsonl"),
                       ((f"pilot={launches_only}", out), "no measured closed-loop launch"),
                       ((f"pilots={PILOT}", out), "expected KEY=VALUE"),
                       ((out,), "missing: pilot=")):
        p = framework("fit", *args, cwd=workdir)
        assert p.returncode == 2, (args, p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr
        assert says in p.stderr, (args, p.stderr)
    assert not (workdir / "twin.yaml").exists()


@pytest.mark.e2e  # two fits through the CLI: the e2e tier
def test_fit_joins_pilots_of_one_engine_only(workdir: Path) -> None:
    other = workdir / "other"
    shutil.copytree(PILOT, other)
    p = framework("fit", f"pilot={PILOT}", f"pilot={other}", "engine=vllm", f"out={workdir / 't.yaml'}", cwd=workdir,
                  timeout=300)
    assert p.returncode == 0, p.stderr  # two pilots, one engine (engine= names it)
    fit = TwinFit.model_validate(yaml.safe_load((workdir / "t.yaml").read_text()))
    assert fit.engine == "vllm" and len(fit.pilots) == 2 and fit.configs_fitted == 8


def _fit(monkeypatch, capsys, cwd: Path, *args: str) -> tuple[int, str]:
    from framework.cli import main

    monkeypatch.chdir(cwd)
    code = main(["fit", *args])
    return code, capsys.readouterr().err


def _tampered(workdir: Path, name: str, edit) -> Path:
    rows = [json.loads(line) for line in (PILOT / "trials.jsonl").read_text().splitlines()]
    edit(rows)
    run = workdir / name
    run.mkdir()
    (run / "trials.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def _first(rows: list[dict], kind: str) -> dict:
    return next(r for r in rows if r["kind"] == kind and r.get("ok") and r.get("phase", "measured") == "measured")


def test_fit_out_never_replaces_a_file_silently_and_bad_paths_are_one_line(workdir: Path, monkeypatch, capsys) -> None:
    # issue 31: out= overwrote a user's hypothesis file; a directory, /proc or a path under a file gave a traceback
    mine = workdir / "my_hypothesis.yaml"
    mine.write_text("name: mine\n")
    for out, says in ((mine, f"{mine} exists; add overwrite=true to replace it"),
                      (workdir, f"{workdir} is a directory"),
                      (mine / "twin.yaml", f"cannot write {mine / 'twin.yaml'}: {mine} is not a directory"),
                      (Path("/proc/version"), "/proc/version exists; add overwrite=true"),
                      (Path("/proc/no_such_dir/twin.yaml"), "cannot write /proc/no_such_dir/twin.yaml")):
        code, err = _fit(monkeypatch, capsys, workdir, f"pilot={PILOT}", f"out={out}")
        assert code == 2 and "Traceback" not in err and err.startswith("error: command line: out: "), (out, err)
        assert len(err.strip().splitlines()) == 1 and says in err, (out, err)
    assert mine.read_text() == "name: mine\n"
    code, err = _fit(monkeypatch, capsys, workdir, f"pilot={PILOT}", f"out={mine}", "overwrite=maybe")
    assert code == 2 and "overwrite: true or false" in err
    code, err = _fit(monkeypatch, capsys, workdir, f"pilot={PILOT}", f"out={mine}", "overwrite=true")
    assert code == 0, err
    assert TwinFit.model_validate(yaml.safe_load(mine.read_text())).engine == "llamacpp"


def test_fit_names_implausible_pilot_values_and_refuses(workdir: Path, monkeypatch, capsys) -> None:
    tpot = _tampered(workdir, "tpot", lambda rows: _first(rows, "request").update(tpot_s=1e300))
    tp = _tampered(workdir, "tp", lambda rows: _first(rows, "launch").update(
        argv=[*_first(rows, "launch")["argv"], "--tp-size", "100000000"]))
    for run, says in ((tpot, "tpot/c4-r0-a1: tpot_s 1e+300 (0 to 10 s)"),
                      (tp, "tp/c4-r0-a1: tp_size 1e+08 (1 to 1024)")):
        code, err = _fit(monkeypatch, capsys, workdir, f"pilot={run}", f"out={workdir / 'twin.yaml'}")
        assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
        assert "implausible measured values, not fitted" in err and says in err, err
    assert not (workdir / "twin.yaml").exists()


SIM_PILOT = """\
name: sim_pilot
statement: a pilot of the sim's own profile at 1 and 4 streams
experiment: rtx_pro_6000_tp8
metric: tpot_s
factors:
  streams:
    reference: c1
    levels:
      c1: {workload: {concurrency: 1}}
      c4: {workload: {concurrency: 4}}
  prompt:
    reference: short
    levels:
      short: {workload: {prompt_tokens: 64}}
      long: {workload: {prompt_tokens: 256}}
predictions:
  - {id: more_streams_slower, kind: increase, factor: streams, level: c4, where: {prompt: short}}
design: {launches: 2, requests: 4, warmup: 1, seed: 20261202}
"""

AT16 = SIM_PILOT.replace("name: sim_pilot", "name: at16").replace("c4: {workload: {concurrency: 4}}",
                                                                  "c4: {workload: {concurrency: 16}}")


@pytest.mark.e2e  # a pilot on the sim, a fit and a plan through the CLI
def test_a_twin_of_a_tp8_pilot_is_accepted_on_its_experiment_marks_extrapolation_and_plan_finishes(
        workdir: Path) -> None:
    """Fitted at 1 and 4 streams on the TP8 profile: the twin records the pilot's domain, TP size and load; plan on
    the same experiment is not refused ("--tp-size fixed at 1"), prints the twin's 16-stream prediction marked
    as an extrapolation, plans again with the twin's uncertainty propagated, and returns."""
    (workdir / "hyp").mkdir()
    (workdir / "hyp" / "sim_pilot.yaml").write_text(SIM_PILOT)
    (workdir / "hyp" / "at16.yaml").write_text(AT16)
    hyp = f"paths.hypotheses={workdir / 'hyp'}"
    p = framework("run", "hypothesis=sim_pilot", hyp, "progress=false", "report=false", cwd=workdir, timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    pilot = json.loads((workdir / "verdicts.jsonl").read_text().splitlines()[-1])["run_dir"]
    out = workdir / "twin.yaml"
    p = framework("fit", f"pilot={pilot}", f"out={out}", cwd=workdir, timeout=300)
    assert p.returncode == 0, p.stderr
    fit = TwinFit.model_validate(yaml.safe_load(out.read_text()))
    assert fit.fixed["tp_size"] == 8 and fit.domain.concurrency == (1, 4) and fit.domain.tp_size == [8]
    assert fit.pilot_host["launches_with_load"] == 8 and fit.pilot_host["cores"] >= 1
    assert isinstance(fit.busy, list) and ("warning: the pilot's machine looked busy" in p.stdout) == bool(fit.busy)
    p = framework("plan", "hypothesis=at16", hyp, "backend=sim", f"sim_profile={out}", cwd=workdir, timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    text = " ".join(p.stdout.split())
    assert "assumptions from the twin" in text and "fixed at" not in text
    assert "extrapolation: streams 16 outside the pilot's 1-4" in text and "no interval" not in text
    assert "with the twin's uncertainty" in text and "assurance" in text
