"""`plan`'s probe of the sim's measurement noise, end to end: real sim processes through `python -m framework plan`.

The unit test in tests/analysis/test_planning.py checks how a given measurement enters the plan; this one checks
that the CLI really launches the probe, that what it prints was measured (a finite sd per condition),
and that the measured noise enters the plan: never fewer launches than the model alone, which is what
`probe=false` plans with (tests/cli/test_cli.py checks that `probe=false` prints no probe). Two conditions
keep it small, about 10 s: the probe is 2 launches x 4 requests per condition (`plan_cmd.PROBE_*`).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from cli_helpers import ROOT, framework, no_servers_left

from framework.analysis import planning
from framework.cli.plan import PROBE_LAUNCHES, PROBE_REQUESTS, plan_from_profile
from framework.core.spec import load_experiment, load_hypothesis

HYPOTHESIS = """\
name: probe_tiny
statement: All-reduce fusion leaves baseline decode unchanged.
experiment: rtx_pro_6000_tp8
metric: decode_tok_s
factors:
  fusion:
    reference: "off"
    levels:
      "off": {}
      "on": {server_args: [--enable-flashinfer-allreduce-fusion]}
predictions:
  - {id: neutral, kind: equivalent, factor: fusion, level: "on", margin: 0.02}
design: {launches: 3, requests: 2, warmup: 1, seed: 16}
"""
FAST = ['backend.extra_args=[--sim-startup-s,"0"]']  # the sims start at once: the probe's launches cost ~1 s each

PROBED = re.compile(r"probed now with its noise model off \((\d+) launches x (\d+) requests per condition at "
                    r"speed-up 20\): between launches ([0-9.]+)%, per request ([0-9.%, ]+?) \(probe=false")


def _plan(workdir: Path) -> str:
    out = framework("plan", "hypothesis=probe_tiny", f"paths.hypotheses={workdir / 'hyp'}",
                    f"paths.experiments={ROOT / 'experiments'}", *FAST, cwd=workdir)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    return " ".join(out.stdout.split())  # rich wraps long lines


def _launches(text: str) -> int:
    found = re.search(r"whole hypothesis: (\d+) launches per condition", text)
    assert found, text[-2000:]
    return int(found.group(1))


@pytest.mark.e2e
def test_plan_probes_the_sims_measurement_noise_and_plans_with_it(workdir):
    (workdir / "hyp").mkdir()
    (workdir / "hyp" / "probe_tiny.yaml").write_text(HYPOTHESIS)
    text = _plan(workdir)
    found = PROBED.search(text)
    assert found, text[-2000:]
    assert (int(found.group(1)), int(found.group(2))) == (PROBE_LAUNCHES, PROBE_REQUESTS)
    between = float(found.group(3)) / 100
    within = [float(v.strip().rstrip("%")) / 100 for v in found.group(4).split(",")]
    # one measured sd per condition, each from 2 launches x 4 requests of real streams: finite, and small
    # next to the metric (0 on an idle machine, where the client reads the sim's model clock; a few % under load)
    assert len(within) == 2 and all(math.isfinite(v) and 0 <= v < 0.5 for v in within), within
    assert math.isfinite(between) and 0 <= between < 0.5
    assert no_servers_left(workdir), "a probe server outlived plan"

    # the model alone, as `plan probe=false` computes it: the probe can only add noise, never remove it
    h = load_hypothesis(workdir / "hyp" / "probe_tiny.yaml")
    exp = load_experiment(ROOT / "experiments" / "rtx_pro_6000_tp8.yaml")
    alone, _ = plan_from_profile(h, exp, power=0.9, requests=2, warmup=1, alpha=0.05)
    assert _launches(text) >= planning.launches_for_hypothesis(alone)
