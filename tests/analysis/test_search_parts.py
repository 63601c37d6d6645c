"""The search's pure parts: the grid, the crash model, the ranking and racing, the confirmatory hypothesis."""

from __future__ import annotations

import pytest
from cli_helpers import ROOT

from framework.analysis import search as an
from framework.core.design import conditions
from framework.core.spec import Hypothesis, load_hypothesis

SHIPPED = ROOT / "hypotheses" / "eagle3_tuning.yaml"


def test_the_grid_is_the_space_in_the_files_order_with_the_reference_as_each_factors_reference():
    h = load_hypothesis(SHIPPED)
    grid = an.grid_hypothesis(h)
    assert [c.levels for c in conditions(grid)] == h.search.points()
    assert len(conditions(grid)) == h.search.grid_size() == 40
    assert {f: grid.factors[f].reference for f in grid.factors} == {
        "steps": "3",
        "draft_tokens": "4",
        "fusion": "false",
    }
    assert grid.factors["fusion"].levels["true"].server_args == ["--enable-flashinfer-allreduce-fusion"]
    assert grid.factors["fusion"].levels["false"].server_args == []
    assert grid.factors["steps"].levels["2"].server_args == ["--speculative-num-steps", "2"]


def _cand(i, point, values=(), failed=0, cls=None, started=None):
    c = an.Candidate(i, point, launch_ids=[f"l{i}-{k}" for k in range(len(values))],
                     values={"decode_tok_s": list(values)}, failed=failed)
    if cls:
        c.failure_classes = {cls: failed}
    c.started = len(values) if started is None else started
    return c


def test_a_value_that_crashed_every_configuration_with_it_is_avoided_after_two():
    one = {0: _cand(0, {"steps": "1", "fusion": "true"}, failed=1, cls="cuda_mismatch", started=0),
           1: _cand(1, {"steps": "1", "fusion": "false"}, [50.0, 51.0])}
    assert an.crash_model(one) == {}
    assert an.predicted_crash({"steps": "1", "fusion": "true"}, one, {}) .startswith("crashed at start-up before")
    assert an.predicted_crash({"steps": "2", "fusion": "true"}, one, an.crash_model(one)) is None
    two = {**one, 2: _cand(2, {"steps": "2", "fusion": "true"}, failed=1, cls="cuda_mismatch", started=0)}
    assert an.crash_model(two) == {"fusion": {"true": "cuda_mismatch"}}
    assert "fusion=true crashed every configuration" in an.predicted_crash({"steps": "3", "fusion": "true"}, two,
                                                                           an.crash_model(two))
    # a value some configuration started with is not blamed, nor are two different failure classes
    started = {**two, 3: _cand(3, {"steps": "3", "fusion": "true"}, [90.0, 91.0])}
    assert an.crash_model(started) == {}
    mixed = {**one, 2: _cand(2, {"steps": "2", "fusion": "true"}, failed=1, cls="out_of_memory", started=0)}
    assert an.crash_model(mixed) == {}


def test_the_ranking_is_by_median_so_one_slow_launch_does_not_decide():
    search = load_hypothesis(SHIPPED).search
    search = search.model_copy(update={"goal": search.goal.model_copy(update={"constraints": []})})
    cands = {0: _cand(0, {"x": "a"}, [100.0, 101.0, 92.0]),  # one slow launch: mean 97.6, median 100
             1: _cand(1, {"x": "b"}, [99.0, 99.0, 99.0])}
    assert [c.index for c in an.ranked(cands, search)] == [0, 1]
    # racing: the leader has not beaten b beyond the noise, and b has no more launches than it: b is next...
    assert an.next_in_race(cands, search).index in (0, 1)
    far = {**cands, 2: _cand(2, {"x": "c"}, [50.0, 50.5])}
    assert an.next_in_race(far, search).index != 2  # ...and a candidate far behind is out of the race


def test_the_race_stops_when_the_leader_is_alone():
    """Issue 35: the race kept launching the leader after it had beaten every other (one-point re-launches)."""
    search = load_hypothesis(SHIPPED).search
    search = search.model_copy(update={"goal": search.goal.model_copy(update={"constraints": []})})
    alone = {0: _cand(0, {"x": "a"}, [100.0, 100.5, 99.5]), 1: _cand(1, {"x": "b"}, [50.0, 50.2, 49.8])}
    assert an.next_in_race(alone, search) is None


def test_the_confirmation_is_a_valid_hypothesis_with_the_declared_min_effect_and_a_fresh_seed():
    h = load_hypothesis(SHIPPED)
    chosen = {"steps": "2", "draft_tokens": "4", "fusion": "true"}
    data = an.confirm_hypothesis(h, [chosen], "abc", an.confirm_seed("f" * 64, h.design.seed, 0))
    c = Hypothesis.model_validate(data)
    assert c.name == "eagle3_tuning_confirm_abc" and c.metric == "decode_tok_s"
    assert c.factors["config"].levels["chosen"].server_args == [
        "--speculative-num-steps", "2", "--speculative-num-draft-tokens", "4", "--enable-flashinfer-allreduce-fusion"]
    assert c.factors["config"].levels["reference"].server_args == [
        "--speculative-num-steps", "3", "--speculative-num-draft-tokens", "4"]
    (p,) = c.predictions
    assert p.kind == "increase" and p.min_effect == h.search.confirm.min_effect and p.level == "chosen"
    assert c.design.seed == an.confirm_seed("f" * 64, h.design.seed, 0) != h.design.seed and c.design.launches == 4
    top2 = Hypothesis.model_validate(an.confirm_hypothesis(h, [chosen, chosen], "abc", 1))
    assert [p.level for p in top2.predictions] == ["top1", "top2"] and top2.design.alpha == pytest.approx(0.025)


def test_the_confirmation_seed_is_a_function_of_the_file_the_declared_seed_and_the_run_index_only():
    """No clock in it: the same (file, seed, index) gives the same seed, any of them changed gives another, and
    it is never the exploration's own design seed."""
    base = an.confirm_seed("a" * 64, 11, 0)
    assert base == an.confirm_seed("a" * 64, 11, 0)
    assert len({base, an.confirm_seed("b" * 64, 11, 0), an.confirm_seed("a" * 64, 12, 0),
                an.confirm_seed("a" * 64, 11, 1)}) == 4
    assert all(an.confirm_seed("a" * 64, s, 0) != s for s in range(200))


def test_an_slo_along_a_load_dimension_gives_the_capacity_ladder_of_the_chosen_configuration():
    from framework.core.search import SearchBlock
    from framework.stats.capacity import LoadLevel, slo_capacity

    s = SearchBlock.model_validate({
        "space": {"load": {"workload": "concurrency", "values": [1, 2, 4]},
                  "fusion": {"flag": "--enable-flashinfer-allreduce-fusion", "values": [False, True]}},
        "reference": {"load": 1, "fusion": False},
        "goal": {"metric": "output_throughput", "direction": "maximize", "constraints": ["ttft_s.p99 <= 0.5"]},
        "budget": {"launches": 8}, "confirm": {"min_effect": 0.05}})
    ttft = {"1": [0.1, 0.11, 0.1], "2": [0.3, 0.31, 0.29], "4": [0.9, 1.0, 0.95]}
    cands = {i: an.Candidate(i, {"load": lv, "fusion": "true"},
                             values={"output_throughput": [1.0, 1.0, 1.0], "ttft_s.p99": v})
             for i, (lv, v) in enumerate(ttft.items())}
    cands[9] = an.Candidate(9, {"load": "4", "fusion": "false"}, values={"ttft_s.p99": [0.2, 0.2]})  # other config
    (ladder,) = an.capacity_ladders(cands, s, {"load": "2", "fusion": "true"})
    assert ladder["dimension"] == "load" and [r[0] for r in ladder["rungs"]] == [1.0, 2.0, 4.0]
    cap = slo_capacity([LoadLevel(x, v) for x, v in ladder["rungs"]], ladder["threshold"], ladder["op"])
    assert cap.estimate == 2.0 and cap.lower_bound in (1.0, 2.0)


def test_a_budget_above_what_the_space_can_use_is_capped():
    from framework.core.search import MAX_LAUNCHES_PER_POINT

    search = load_hypothesis(SHIPPED).search
    assert search.capped() is search  # the shipped budget fits its space
    big = search.model_copy(update={"budget": search.budget.model_copy(update={"launches": 10_000, "refine": 9_000})})
    usable = search.grid_size() * MAX_LAUNCHES_PER_POINT
    assert big.usable_launches() == usable and big.capped().budget.launches == usable
    assert big.capped().budget.refine == usable - 1  # an explicit refine keeps a launch to explore
