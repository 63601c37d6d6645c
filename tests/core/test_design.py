"""Conditions and the randomized-block schedule."""

from collections import Counter

from cli_helpers import ROOT

from framework.core import design
from framework.core.spec import load_experiment, load_hypothesis

H = load_hypothesis(ROOT / "hypotheses" / "eagle3_allreduce.yaml")
E = load_experiment(ROOT / "experiments" / "rtx_pro_6000_tp8.yaml")


def test_conditions_are_the_full_factorial_in_declared_order():
    conds = design.conditions(H)
    assert [c.levels for c in conds] == [
        {"fusion": "off", "decoding": "baseline"}, {"fusion": "off", "decoding": "eagle3"},
        {"fusion": "on", "decoding": "baseline"}, {"fusion": "on", "decoding": "eagle3"},
    ]


def test_every_block_holds_each_condition_once_and_order_is_seeded():
    plan = design.schedule(H, 5, seed=7)
    assert len(plan) == 20
    for block in range(5):
        assert sorted(p.condition.index for p in plan if p.block == block) == [0, 1, 2, 3]
    assert [p.launch_id for p in plan] == [p.launch_id for p in design.schedule(H, 5, seed=7)]
    assert [p.launch_id for p in plan] != [p.launch_id for p in design.schedule(H, 5, seed=8)]
    orders = {tuple(p.condition.index for p in plan if p.block == b) for b in range(5)}
    assert len(orders) > 1, "blocks should not all share one order"


def test_sequential_blocks_continue_the_replicate_numbers():
    first = design.schedule(H, 2, seed=1)
    more = design.schedule(H, 2, seed=1, first_replicate=2)
    assert {p.launch_id for p in first}.isdisjoint({p.launch_id for p in more})
    assert [p.launch_id for p in design.schedule(H, 4, seed=1)] == [p.launch_id for p in first + more]


def test_launch_seeds_are_distinct():
    seeds = Counter(p.seed for p in design.schedule(H, 10, seed=3))
    assert max(seeds.values()) == 1


def test_server_args_compose_experiment_then_levels():
    cond = design.conditions(H)[3]
    args = design.server_args_for(H, E, cond)
    assert args[:4] == ["--mem-fraction-static", "0.85", "--cuda-graph-max-bs", "16"]
    assert "--enable-flashinfer-allreduce-fusion" in args and "EAGLE3" in args
