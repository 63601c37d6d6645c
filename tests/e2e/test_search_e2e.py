"""The shipped search end to end on the sim (marker e2e: about 32 launches, 1-2 minutes on two cores): it finds
the configuration the sim's model says is best, in fewer launches than the grid, and confirms it; and a search
on the CUDA 12.8 stack learns that fusion crashes there and stops launching it."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from cli_helpers import ROOT, framework, ledger_records, no_servers_left

from framework.analysis.search import grid_hypothesis
from framework.core import design
from framework.core.spec import load_experiment, load_hypothesis
from framework.servers.sim.expected import expected_metrics

pytestmark = pytest.mark.e2e


def _model_value(h, exp, point: dict[str, str]) -> float:
    grid = grid_hypothesis(h)
    cond = next(c for c in design.conditions(grid) if c.levels == point)
    flags = ["--tp-size", str(exp.tp_size), *design.server_args_for(grid, exp, cond)]
    w = design.workload_for(grid, exp, cond)
    return expected_metrics(exp.sim.profile, flags, w.prompt_tokens, w.output_tokens, w.concurrency,
                            requests=h.design.requests, warmup=h.design.warmup)[h.search.goal.metric]


def test_the_shipped_search_finds_the_models_best_in_fewer_launches_than_the_grid_and_confirms_it(workdir):
    out = framework("search", "hypothesis=eagle3_tuning", "run_dir=s", cwd=workdir)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert no_servers_left(workdir)
    summary = json.loads((workdir / "s" / "search.json").read_text())
    h = load_hypothesis(ROOT / "hypotheses" / "eagle3_tuning.yaml")
    exp = load_experiment(ROOT / "experiments" / "rtx_pro_6000_tp8.yaml")
    best = max(_model_value(h, exp, p) for p in h.search.points())
    (chosen,) = summary["chosen"]
    assert _model_value(h, exp, chosen["point"]) == pytest.approx(best, rel=1e-9), (chosen, summary["ranking"])
    # the exploration's budget, then the selection's fresh launches (KN, at most finalists x max_launches)
    fresh = sum(summary["selection"]["fresh_launches"].values())
    assert summary["launches_spent"] == h.search.budget.launches + fresh
    assert summary["launches_spent"] <= h.search.budget.launches + h.search.select_launches() < 80
    assert summary["grid_launches"] == 80
    est = summary["estimate"]
    assert est["naive"] > 1.05 and est["corrected"] is not None  # the reported pair, beside each other
    verdict = ledger_records(workdir / "verdicts.jsonl")[-1]
    assert verdict["verdict"] == "supported" and verdict["search"]["id"] == summary["id"], verdict["predictions"]
    audit = framework("audit", cwd=workdir)
    assert audit.returncode == 0, audit.stdout[-2000:] + audit.stderr[-2000:]


CRASHY = """\
name: fusion_on_cuda12_8
statement: A search over fusion and draft steps on the CUDA 12.8 stack, where fusion has no SM120 kernels.
experiment: rtx_pro_6000_tp8_cu128
metric: decode_tok_s
server_args: [--speculative-algorithm, EAGLE3, --speculative-draft-model-path, lmsys/SGLang-EAGLE3-DeepSeek-V3,
              --speculative-eagle-topk, "1"]
search:
  space:
    steps: {flag: --speculative-num-steps, range: {low: 1, high: 5}}
    fusion: {flag: --enable-flashinfer-allreduce-fusion, values: [false, true]}
  reference: {steps: 3, fusion: false}
  goal: {metric: decode_tok_s, direction: maximize}
  budget: {launches: 12, refine: 2}
  sampler: random
  confirm: {min_effect: 0.0, launches: 2}
design: {requests: 2, warmup: 1, seed: 3}
"""


def test_a_configuration_that_crashes_is_learned_and_not_launched_again(workdir: Path):
    (workdir / "hyp").mkdir()
    (workdir / "exp").mkdir()
    (workdir / "hyp" / "fusion_on_cuda12_8.yaml").write_text(CRASHY)
    exp = (ROOT / "experiments" / "rtx_pro_6000_tp8.yaml").read_text()
    (workdir / "exp" / "rtx_pro_6000_tp8_cu128.yaml").write_text(
        exp.replace("name: rtx_pro_6000_tp8", "name: rtx_pro_6000_tp8_cu128")
        .replace("profile: rtx_pro_6000_tp8", "profile: rtx_pro_6000_tp8_cu128"))
    out = framework("search", "hypothesis=fusion_on_cuda12_8", f"paths.hypotheses={workdir / 'hyp'}",
                    f"paths.experiments={workdir / 'exp'}", "run_dir=s", cwd=workdir)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    summary = json.loads((workdir / "s" / "search.json").read_text())
    failed = [t for t in summary["trials"] if t.get("state") == "failed"]
    assert failed and all(t["point"]["fusion"] == "true" and t["failure_class"] for t in failed), failed
    # a configuration that crashed at start-up is launched once, never again
    crashed = [c for c in summary["candidates"] if c["failed"]]
    assert all(c["failed"] == 1 and not c["launch_ids"] for c in crashed)
    if len(crashed) >= 2:  # two crashed, none with fusion started: the value itself is avoided from then on
        assert summary["crash_model"] == {"fusion": {"true": failed[0]["failure_class"]}}
        after = [t for t in summary["trials"][summary["trials"].index(failed[1]) + 1:]
                 if t["point"]["fusion"] == "true"]
        assert all(t["state"] == "avoided" for t in after), after
    assert all(c["point"]["fusion"] == "false" for c in summary["chosen"])
    assert framework("audit", cwd=workdir).returncode == 0


def test_the_front_of_two_metrics_is_written_with_intervals(workdir: Path):
    (workdir / "hyp").mkdir()
    (workdir / "hyp" / "two_metrics.yaml").write_text(textwrap.dedent("""\
        name: two_metrics
        statement: Decode speed against time to first token over the draft steps, with fusion on.
        experiment: rtx_pro_6000_tp8
        metric: decode_tok_s
        server_args: [--speculative-algorithm, EAGLE3, --speculative-draft-model-path, x, --speculative-eagle-topk,
                      "1", --enable-flashinfer-allreduce-fusion]
        search:
          space:
            steps: {flag: --speculative-num-steps, values: [1, 2, 6]}
          reference: {steps: 6}
          goal: {metric: decode_tok_s, direction: maximize, pareto_with: {metric: ttft_s, direction: minimize}}
          budget: {launches: 5, refine: 0}
          confirm: {min_effect: 0.05, launches: 3}
        design: {requests: 2, warmup: 1, seed: 4}
        """))
    out = framework("search", "hypothesis=two_metrics", f"paths.hypotheses={workdir / 'hyp'}", "run_dir=s",
                    cwd=workdir)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    front = json.loads((workdir / "s" / "search.json").read_text())["front"]
    assert [o["metric"] for o in front["objectives"]] == ["decode_tok_s", "ttft_s"]
    assert front["points"] and all(len(p["estimates"]) == 2 for p in front["points"])
    assert set(front["naive_front"]) <= set(front["confident_front"])
