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
