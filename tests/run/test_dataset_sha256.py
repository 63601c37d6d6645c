"""A dataset registered by its sha256 is checked before anything starts: other prompts are refused in one line."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from framework.core.spec import Experiment, Hypothesis
from framework.core.workload import Workload
from framework.errors import SpecError
from framework.run.preflight import check_pair

ROOT = Path(__file__).resolve().parents[2]


def pair(tmp_path: Path, sha: str) -> tuple[Hypothesis, Experiment]:
    (tmp_path / "p.jsonl").write_text('{"prompt": "hello there"}\n')
    h = Hypothesis.model_validate({
        "name": "h", "statement": "s", "experiment": "e",
        "factors": {"f": {"reference": "a", "levels": {"a": {}, "b": {}}}},
        "predictions": [{"id": "p", "kind": "increase", "factor": "f", "level": "b"}]})
    w = Workload.model_validate({"prompt": "text", "dataset": {"path": "p.jsonl", "format": "jsonl", "sha256": sha}})
    return h, Experiment(name="e", model_path="m", workload=w)


def test_the_registered_digest_passes_and_another_is_refused(tmp_path):
    good = hashlib.sha256(b'{"prompt": "hello there"}\n').hexdigest()
    h, exp = pair(tmp_path, good)
    check_pair(h, tmp_path / "h.yaml", exp)
    h, exp = pair(tmp_path, "0" * 64)
    with pytest.raises(SpecError, match="not the registered 0000") as err:
        check_pair(h, tmp_path / "h.yaml", exp)
    assert "dataset.path" in str(err.value) and "\n" not in str(err.value)


def test_the_shipped_prompts_match_their_registered_digests():
    from framework.core.spec import load_experiment, load_hypothesis

    h = load_hypothesis(ROOT / "hypotheses" / "smollm2_speculation.yaml")
    check_pair(h, ROOT / "hypotheses" / "smollm2_speculation.yaml",
               load_experiment(ROOT / "experiments" / f"{h.experiment}.yaml"))


def test_an_outputs_prediction_without_a_prompt_seed_is_refused_by_preflight(tmp_path):
    h = Hypothesis.model_validate({
        "name": "h", "statement": "s", "experiment": "e",
        "factors": {"f": {"reference": "a", "levels": {"a": {}, "b": {}}}},
        "predictions": [{"id": "same", "kind": "outputs", "factor": "f", "level": "b"}]})
    with pytest.raises(SpecError, match=r"predictions\[0\].*set workload.prompt_seed"):
        check_pair(h, tmp_path / "h.yaml", Experiment(name="e", model_path="m"))
