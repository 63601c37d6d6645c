"""`plan`'s printout: the sequential sizing stays bounded at any fixed-design n (plan finishes after its table)."""

from __future__ import annotations

import math

from cli_helpers import ROOT
from rich.console import Console

from framework.analysis.planning import PlanRow
from framework.cli import plan as plan_cmd
from framework.core.spec import load_hypothesis
from framework.stats.sequential import sequential_cap


def test_the_sequential_block_keeps_the_looks_at_the_bound_and_the_declared_block_when_it_fits():
    assert plan_cmd.sequential_block(10, 2) == 2  # 5 looks: the declared block
    for n in (64, 246, 1000):
        block = plan_cmd.sequential_block(n, 2)
        assert math.ceil(n / block) <= plan_cmd.MAX_PLAN_LOOKS and block > 2


def test_a_plan_of_246_launches_prints_its_sequential_cap_with_a_wider_block_and_returns():
    """At n = 246 with blocks of 2 the sizing took over 23 minutes (123 looks); with at most 10 looks it is the
    same textbook cap (stats.sequential.sequential_cap) at the block plan names, and plan says so."""
    h = load_hypothesis(ROOT / "hypotheses" / "eagle3_allreduce.yaml")
    row = PlanRow("neutral_for_baseline", "equivalent", 1.0, "supported", 246, 984, None, 0.9)
    console = Console(width=400, record=True)
    plan_cmd.print_plan(console, h, [row], 0.9, "assumptions from a test", 2, 1, block=2, alpha=0.05)
    text = " ".join(console.export_text().split())
    block = plan_cmd.sequential_block(246, 2)
    cap = sequential_cap(246, block, 0.05)
    assert cap >= 246 and f"blocks of {block} up to {cap} launches per condition" in text
    assert "blocks of 2 would make 123 looks" in text and f"design.sequential.block={block}" in text
