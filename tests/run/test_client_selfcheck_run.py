"""Through `python -m framework run` against the known-schedule server (backend=schedule): a run whose
client cannot follow the stream warns with the possible bias and marks its verdict UNRELIABLE; a light
run does neither. The metric is e2e_s, which a client that falls far behind still measures (every
token of a stream may then come in one read, leaving no decode interval). The heavy load is far
beyond one client core (256 streams, a token every millisecond each), the light one a single stream
at a token every 20 ms, so both hold on a loaded machine."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import framework, ledger_records

EXPERIMENT = """\
name: sched
model_path: schedule
tp_size: 1
server_args: [--first-token-ms, "{first}", --interval-ms, "{interval}"]
workload: {{prompt_tokens: 4, output_tokens: {tokens}, concurrency: {streams}}}
"""
HYPOTHESIS = """\
name: sched_aa
statement: two identical conditions of the known-schedule server take as long per request (within 5%)
experiment: sched
metric: e2e_s
factors:
  rig: {{reference: a, levels: {{a: {{}}, b: {{}}}}}}
predictions:
  - {{id: same, kind: equivalent, factor: rig, level: b, margin: 0.05}}
design: {{launches: 2, requests: {requests}, warmup: 0, seed: 1}}
"""


def _run(workdir: Path, *, first: int, interval: int, tokens: int, streams: int, requests: int):
    for sub in ("experiments", "hypotheses"):
        (workdir / sub).mkdir(exist_ok=True)
    (workdir / "experiments" / "sched.yaml").write_text(EXPERIMENT.format(
        first=first, interval=interval, tokens=tokens, streams=streams))
    (workdir / "hypotheses" / "sched_aa.yaml").write_text(HYPOTHESIS.format(requests=requests))
    out = framework("run", "hypothesis=sched_aa", "backend=schedule", cwd=workdir)
    assert out.returncode == 0, out.stderr[-3000:]
    return out, ledger_records(workdir / "verdicts.jsonl")[-1]


@pytest.mark.e2e
def test_a_client_that_cannot_follow_warns_and_marks_the_verdict_its_bias_could_move(workdir):
    """Criterion 2 of the self-check (issue 32) bounds the bias by measured lateness and never calls a loop
    `saturated`; the verdict is then marked exactly when its worst launch's bias could move it
    (framework.analysis.bias.could_move), which on a loaded machine may or may not be the case."""
    from framework.analysis.bias import client_bias, could_move
    from framework.core.spec import load_hypothesis
    from framework.execution.client.selfcheck import CRITERION

    out, record = _run(workdir, first=5, interval=1, tokens=128, streams=256, requests=256)
    text = " ".join(out.stdout.split())
    assert "may have been the bottleneck" in text and "may be off" in text
    workloads = [{**w, "launch_id": lid} for lid, w in record["analysis"]["workloads"].items()]
    assert all(w["client"]["bottleneck"] and w["client"]["criterion"] == CRITERION for w in workloads)
    summary = client_bias(workloads, "e2e_s")
    assert summary is not None and not summary["saturated"]
    worst = summary["bias"] or 0.0
    (pred,) = record["predictions"]
    h = load_hypothesis(workdir / "hypotheses" / "sched_aa.yaml")
    marked = any(m.startswith("UNRELIABLE: the client") for m in pred["marks"])
    assert marked == could_move(h, pred, worst), (pred["ci"], worst, pred["marks"])


@pytest.mark.e2e
def test_a_light_run_is_neither_warned_nor_marked(workdir):
    out, record = _run(workdir, first=20, interval=20, tokens=20, streams=1, requests=3)
    assert "bottleneck" not in out.stdout
    (pred,) = record["predictions"]
    assert not any("client" in m for m in pred["marks"]), pred["marks"]
    assert not any(w["client"]["bottleneck"] for w in record["analysis"]["workloads"].values())
