"""The simulator refuses what it does not model: the pure check over conditions' command lines."""

from __future__ import annotations

from cli_helpers import ROOT

from framework.core.spec import load_experiment, load_hypothesis
from framework.servers.sim.coverage import Condition, check
from framework.servers.sim.coverage import conditions as sim_conditions

BASE = ["--model-path", "deepseek-ai/DeepSeek-V3", "--tp-size", "8"]
RTX = "rtx_pro_6000_tp8"


def conds(*levels: tuple[str, list[str]], profile: str = RTX) -> list[Condition]:
    return [Condition(f"f={name}", {"f": name}, BASE + argv, profile) for name, argv in levels]


def test_a_varied_unmodelled_flag_is_refused_naming_flag_and_levels():
    cov = check(conds(("high", ["--mem-fraction-static", "0.90"]), ("low", ["--mem-fraction-static", "0.60"])))
    assert [f.flag for f in cov.refused] == ["--mem-fraction-static"]
    assert cov.refused[0].line() == (
        "--mem-fraction-static (not modelled) differs between levels: f=high: 0.9, f=low: 0.6"
    )


def test_each_of_the_issue_s_examples_is_refused():
    cases = [
        (["--tp-size", "4"], []),  # against the TP8 profile
        (["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1"],
         ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1"]),
        (["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1"],
         ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3", "--speculative-eagle-topk", "2",
          "--speculative-num-draft-tokens", "8"]),
        (["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
          "--speculative-draft-model-path", "a"],
         ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
          "--speculative-draft-model-path", "b"]),
        (["--chunked-prefill-size", "4096"], ["--chunked-prefill-size", "8192"]),
    ]
    for a, b in cases:
        cov = check(conds(("a", a), ("b", b)))
        assert cov.refused, (a, b)


def test_modelled_differences_and_sglang_equivalents_are_accepted():
    eagle = ["--speculative-num-steps", "3", "--speculative-eagle-topk", "1"]
    ok = [
        ([], ["--enable-flashinfer-allreduce-fusion"]),
        ([], ["--speculative-algorithm", "EAGLE3", *eagle]),
        (["--speculative-algorithm", "NEXTN", *eagle], ["--speculative-algorithm", "EAGLE", *eagle]),  # same in SGLang
        # topk 1: SGLang resets 8 draft tokens to num_steps + 1 = 4, so these are the same server
        (["--speculative-algorithm", "EAGLE3", *eagle, "--speculative-num-draft-tokens", "8"],
         ["--speculative-algorithm", "EAGLE3", *eagle, "--speculative-num-draft-tokens", "4"]),
        (["--log-level", "info"], ["--log-level", "debug"]),  # no effect on performance
    ]
    for a, b in ok:
        cov = check(conds(("a", a), ("b", b)))
        assert not cov.refused, (a, b, [f.line() for f in cov.refused])


def test_constant_unmodelled_flags_are_accepted_and_listed():
    tuning = ["--chunked-prefill-size", "4096", "--attention-backend", "fa3", "--kv-cache-dtype", "fp8_e4m3",
              "--enable-torch-compile", "--schedule-policy", "lpm"]
    cov = check(conds(("a", tuning), ("b", tuning + ["--enable-flashinfer-allreduce-fusion"])))
    assert not cov.refused and not cov.problems
    assert {"--chunked-prefill-size", "--attention-backend", "--kv-cache-dtype", "--enable-torch-compile",
            "--schedule-policy"} <= set(cov.constant)


def test_an_unknown_flag_is_a_problem_not_a_crash():
    cov = check(conds(("a", ["--no-such-flag"]), ("b", [])))
    assert cov.problems and "--no-such-flag" in cov.problems[0]


def test_shipped_hypotheses_pass_and_record_their_constant_unmodelled_flags():
    for name in ("eagle3_allreduce", "torch_symm_mem", "cuda13_unblocks_fusion"):
        h = load_hypothesis(ROOT / "hypotheses" / f"{name}.yaml")
        exp = load_experiment(ROOT / "experiments" / f"{h.experiment}.yaml")
        cov = check(sim_conditions(h, exp))
        assert not cov.refused and not cov.problems, name
        assert "--mem-fraction-static" in cov.constant
