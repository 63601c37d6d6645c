"""A bisection over three llama.cpp server settings on real servers (marker `llamacpp`; the seeded tiny model of
framework.assets.tiny_gguf; at most 3 x 6 short launches, one to two minutes on a loaded 2-core box).

The versions are software-stack levels: one decode thread twice, then two threads (on a 2-core machine shared
with the client, they may help or hurt). What the hardware says decides the outcome; the test holds the run
path to its contract whatever it is: registered first, every launch a real llama.cpp server, each version's
launches as the replay asks, and the record audits."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from cli_helpers import framework, ledger_records

from framework.assets.tiny_gguf import tiny_llama, write_gguf

MISSING = [m for m in ("llama_cpp", "gguf", "fastapi", "sse_starlette", "pydantic_settings")
           if importlib.util.find_spec(m) is None]
pytestmark = [
    pytest.mark.llamacpp,
    pytest.mark.skipif(bool(MISSING), reason=f"llama-cpp-python[server] and gguf are not installed ({MISSING}); "
                                            "pip install -e '.[llamacpp]' or run .ci/run"),
]

HYPOTHESIS = """\
name: llamacpp_bisect
statement: Among three llama.cpp thread settings, the first that decodes 20% slower or faster is named.
experiment: bisect_cpu.yaml
metric: decode_tok_s
bisect:
  threshold: 0.20
  versions:
    - {name: t1, server_args: [--n_threads, "1"]}
    - {name: t1-again, server_args: [--n_threads, "1"]}
    - {name: t2, server_args: [--n_threads, "2"]}
  launches: 4
  block: 2
  max_launches: 6
# alpha 0.2 (ends 0.1, the probe 0.1): the smallest launch count at which the anytime test can decide is 4 here
# (at alpha 0.05 it is 6 for the ends and 7 for a probe of 64 versions: docs/statistics.md, section 13)
design: {requests: 2, warmup: 1, seed: 20261202, alpha: 0.2}
"""
EXPERIMENT = """\
name: bisect_cpu
flags: llamacpp
model_path: models/tiny-llama.gguf
server_args: [--n_ctx, "256"]
workload: {prompt: text, prompt_tokens: 16, output_tokens: 16, temperature: 0.0}
"""


def test_a_bisection_over_llamacpp_settings_runs_on_real_servers_and_audits(workdir: Path) -> None:
    (workdir / "models").mkdir()
    write_gguf(tiny_llama(0), workdir / "models" / "tiny-llama.gguf")
    (workdir / "h.yaml").write_text(HYPOTHESIS, encoding="utf-8")
    (workdir / "bisect_cpu.yaml").write_text(EXPERIMENT, encoding="utf-8")
    out = framework("bisect", "hypothesis=h.yaml", "backend=llamacpp", "run_dir=b", cwd=workdir, timeout=300)
    assert out.returncode in (0, 3), out.stdout[-3000:] + out.stderr[-3000:]
    summary = json.loads((workdir / "b" / "bisect.json").read_text())
    assert summary["outcome"] in ("named", "no_change", "undecided"), summary["reason"]
    assert (out.returncode == 0) == (summary["outcome"] in ("named", "no_change"))
    per = {v["version"]: v for v in summary["versions"]}
    assert per["t1"]["launches"] >= 4 and per["t2"]["launches"] >= 4  # the ends, compared first
    assert all(v["launches"] <= 6 for v in summary["versions"])
    if summary["outcome"] != "named":
        assert summary["probed"] == [] or summary["outcome"] == "undecided"
    kinds = [r["kind"] for r in ledger_records(workdir / "verdicts.jsonl")]
    assert kinds == ["registration", "bisect"]
    argv = next(r["argv"] for r in ledger_records(workdir / "b" / "trials.jsonl") if r["kind"] == "launch")
    assert argv[1:3] == ["-m", "llama_cpp.server"]
    audit = framework("audit", cwd=workdir)
    assert audit.returncode == 0, audit.stdout[-2000:] + audit.stderr[-2000:]
