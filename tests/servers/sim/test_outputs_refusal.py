"""The sim generates no text: an `outputs` prediction on it is refused in one line before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from framework.servers.sim.coverage import NO_TEXT, unanswerable

ROOT = Path(__file__).resolve().parents[3]

OUTPUTS = """name: spec_outputs
statement: Speculation leaves greedy outputs unchanged
experiment: rtx_pro_6000_tp8
factors:
  spec:
    reference: "off"
    levels:
      "off": {workload: {prompt_seed: 1}}
      "on": {workload: {prompt_seed: 1}, server_args: [--speculative-algorithm, EAGLE3]}
predictions:
  - {id: same_outputs, kind: outputs, factor: spec, level: "on", min_agreement: 1.0}
design: {launches: 2, requests: 4, warmup: 1, seed: 3}
"""


@pytest.mark.parametrize("allow", [False, True])
def test_run_refuses_an_outputs_prediction_on_the_sim_in_one_line(workdir, monkeypatch, capsys, allow):
    from framework.cli import main

    (workdir / "hyp").mkdir()
    (workdir / "hyp" / "spec_outputs.yaml").write_text(OUTPUTS)
    monkeypatch.chdir(workdir)
    code = main(["run", "hypothesis=spec_outputs", f"paths.hypotheses={workdir / 'hyp'}",
                 f"paths.experiments={ROOT / 'experiments'}", *(["sim.allow_unmodelled=true"] if allow else [])])
    line = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in line and "Traceback" not in line, line
    assert "spec_outputs.yaml" in line and "predictions[0].kind" in line and "generates no text" in line, line
    assert not (workdir / "outputs").exists() and not (workdir / "verdicts.jsonl").exists()


def test_only_outputs_predictions_are_unanswerable():
    from framework.core.spec import Hypothesis

    h = Hypothesis.model_validate({
        "name": "h", "statement": "s", "experiment": "e",
        "factors": {"f": {"reference": "a", "levels": {"a": {}, "b": {}}}},
        "predictions": [{"id": "up", "kind": "increase", "factor": "f", "level": "b"},
                        {"id": "same", "kind": "outputs", "factor": "f", "level": "b"}]})
    assert unanswerable(h) == [("predictions[1].kind", f"same: {NO_TEXT}")]
