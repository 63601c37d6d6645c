"""A workload's dataset is checked before any server starts: a missing file is one line, exit 2."""

import yaml
from cli_helpers import ROOT, framework


def test_a_missing_dataset_is_refused_before_anything_starts(workdir):
    hyp = workdir / "hyp"
    hyp.mkdir()
    level = {"workload": {"dataset": {"path": "missing.jsonl"}}}
    (hyp / "ds.yaml").write_text(yaml.safe_dump({
        "name": "ds", "statement": "A dataset workload.", "experiment": "rtx_pro_6000_tp8",
        "factors": {"data": {"reference": "a", "levels": {
            "a": level, "b": {"workload": {**level["workload"], "concurrency": 2}}}}},
        "predictions": [{"id": "p", "kind": "equivalent", "factor": "data", "level": "b", "margin": 0.5}]}))
    out = framework("run", "hypothesis=ds", f"paths.hypotheses={hyp}", f"paths.experiments={ROOT / 'experiments'}",
                    cwd=workdir)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert "dataset.path" in out.stderr and "missing.jsonl" in out.stderr
    assert not (workdir / "outputs").exists()
