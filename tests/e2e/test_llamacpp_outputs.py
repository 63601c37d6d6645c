"""The `outputs` prediction kind and prompt-lookup speculation on the real SmolLM2 model (issue 34, items 2-3).

Marker `llamacpp`, like tests/e2e/test_llamacpp_smollm2.py: left out of the default run; skipped with the install
command as the reason when the model or llama-cpp-python[server] is absent (`.ci/llamacpp.sh` installs both).
Both hypotheses run registered, through `python -m framework`, and audit; the verdicts are what the machine says,
except where a condition was changed on purpose (a sampled level must refute "same outputs").
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from cli_helpers import framework, ledger_records

from framework.assets import smollm2

MISSING = [m for m in ("llama_cpp", "fastapi", "sse_starlette", "pydantic_settings")
           if importlib.util.find_spec(m) is None]
pytestmark = [
    pytest.mark.llamacpp,
    pytest.mark.skipif(bool(MISSING), reason=f"llama-cpp-python[server] is not installed ({MISSING}); "
                                            "pip install -e '.[llamacpp]' or run .ci/run"),
    pytest.mark.skipif(smollm2.installed_path() is None,
                       reason=f"the real model is not installed: {smollm2.INSTALL}"),
]


def _registered_run(workdir: Path, name: str, backend: str) -> dict:
    reg = framework("register", f"hypothesis={name}", f"backend={backend}", cwd=workdir)
    assert reg.returncode == 0 and f"{name}: registered" in reg.stdout, reg.stdout + reg.stderr
    out = framework("run", f"hypothesis={name}", f"backend={backend}", cwd=workdir, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    record = ledger_records(workdir / "verdicts.jsonl")[-1]
    assert record["registration"] and record["rules_version"] >= 5
    model = record["environment"]["model"]
    assert model["sha256"] == smollm2.SHA256 and Path(model["path"]).name == smollm2.FILENAME
    audit = framework("audit", cwd=workdir)
    assert audit.returncode == 0, audit.stdout[-2000:] + audit.stderr[-2000:]
    return record


def test_outputs_kind_supports_a_repeat_and_refutes_a_deliberately_changed_condition(workdir):
    """Greedy again: every paired request identical (supported); sampled at temperature 0.8 with each launch's
    seed: refuted, naming the requests that differ."""
    record = _registered_run(workdir, "smollm2_outputs", "llamacpp")
    preds = {p["id"]: p for p in record["predictions"]}
    same, changed = preds["greedy_repeats_itself"], preds["sampling_changes_outputs"]
    assert same["verdict"] == "supported" and same["details"]["compared"] == 8, same
    assert same["details"]["compares"] == ["text"] and same["details"]["unpaired"] == 0
    assert changed["verdict"] == "refuted" and changed["details"]["differed_count"] >= 1, changed
    first = changed["details"]["differed"][0]
    assert {"block", "index", "first_difference"} <= set(first)
    assert record["verdict"] == "refuted" and "sampling_changes_outputs" in \
        record["analysis"]["details"]["hypothesis_rule"]["refuted_by"]
    trials = ledger_records(Path(record["run_dir"]) / "trials.jsonl")
    kept = [r["output"] for r in trials if r["kind"] == "request" and r.get("output")]
    assert kept and all(len(o["text"]) > 0 and o["tokens"] <= 16 for o in kept)  # bounded by output_tokens


def test_speculation_hypothesis_runs_registered_with_the_mechanism_beside_the_verdict(workdir):
    """Prompt lookup on copy and free prompts: whatever the verdicts, each prediction was judged on measured
    data, and the record carries drafted and accepted tokens per request for the speculative conditions."""
    record = _registered_run(workdir, "smollm2_speculation", "llamacpp_spec")
    preds = {p["id"]: p for p in record["predictions"]}
    assert set(preds) == {"helps_copy", "neutral_for_free", "helps_copy_more_than_free", "same_outputs_copy",
                          "same_outputs_free"}
    for pid in ("helps_copy", "neutral_for_free", "helps_copy_more_than_free"):
        assert preds[pid]["estimate"] is not None and preds[pid]["ci"], preds[pid]
    for pid in ("same_outputs_copy", "same_outputs_free"):
        assert preds[pid]["details"]["compared"] >= 9 and preds[pid]["verdict"] in ("supported", "refuted")
    counters = record["analysis"]["server_counters"]
    on_copy = counters["speculation=on, workload=copy"]
    assert on_copy["launches"] == 3 and on_copy["per_request"]["llamacpp_spec:drafted_tokens_total"] > 0
    assert 0 < on_copy["accept_rate"] <= 1
    off = counters["speculation=off, workload=copy"]
    assert off["totals"]["llamacpp_spec:drafted_tokens_total"] == 0
    workloads = record["analysis"]["workloads"]
    assert any("308919e69598f1a7" in str(w) for w in (workloads.values() if isinstance(workloads, dict)
                                                       else workloads))
