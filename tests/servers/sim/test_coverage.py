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


def test_a_shared_prefix_workload_is_refused_whether_or_not_it_varies():
    """Issue 32: "a shared 1024-token prefix cuts TTFT by 30%" came out refuted at 1.795x on the sim, which has
    no radix cache. Until it models one, any condition with a shared prefix is a question it cannot answer."""
    prefix = {"groups": 1, "prefix_tokens": 1024}
    both = [Condition(f"f={n}", {"f": n}, list(BASE), RTX, shared_prefix=sp) for n, sp in (("a", prefix), ("b", None))]
    cov = check(both)
    assert [f.flag for f in cov.refused] == ["workload.shared_prefix"]
    assert cov.refused[0].line().startswith("workload.shared_prefix (not modelled: the sim has no prefix (radix) "
                                            "cache") and cov.refused[0].line().endswith("is set in [f=a]")
    alike = [Condition(f"f={n}", {"f": n}, BASE + a, RTX, shared_prefix=prefix)
             for n, a in (("x", []), ("y", ["--cuda-graph-max-bs", "8"]))]
    assert [f.flag for f in check(alike).refused] == ["workload.shared_prefix"]
    assert check([Condition("f=a", {"f": "a"}, list(BASE), RTX)]).refused == []


SHARED_PREFIX = """name: prefix_ttft
statement: A shared 1024-token prefix cuts TTFT by 30% or more
experiment: rtx_pro_6000_tp8
metric: ttft_s
factors:
  prefix:
    reference: none
    levels:
      none: {workload: {prompt_tokens: 1100, output_tokens: 8}}
      shared: {workload: {prompt_tokens: 76, output_tokens: 8, shared_prefix: {groups: 1, prefix_tokens: 1024}}}
predictions:
  - {id: cuts_ttft, kind: decrease, factor: prefix, level: shared, min_effect: 0.30}
design: {launches: 2, requests: 4, warmup: 1, seed: 3}
"""


def test_run_refuses_a_shared_prefix_hypothesis_on_the_sim_in_one_line_before_anything_starts(workdir, monkeypatch,
                                                                                            capsys):
    from framework.cli import main

    (workdir / "hyp").mkdir()
    (workdir / "hyp" / "prefix_ttft.yaml").write_text(SHARED_PREFIX)
    monkeypatch.chdir(workdir)
    code = main(["run", "hypothesis=prefix_ttft", f"paths.hypotheses={workdir / 'hyp'}",
                 f"paths.experiments={ROOT / 'experiments'}"])
    line = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in line and "Traceback" not in line, line
    assert "prefix_ttft.yaml" in line and "the simulator cannot answer this: workload.shared_prefix" in line, line
    assert not (workdir / "outputs").exists() and not (workdir / "verdicts.jsonl").exists()


def test_a_twin_fixed_at_its_pilots_tp_size_is_accepted_there_and_a_mismatch_is_not_called_a_difference(tmp_path):
    """A twin fitted from a TP8 pilot serves --tp-size 8 (issue 35: it was refused on the experiment it was fitted
    from); a twin fixed at 1 is refused at 8 with words that do not claim the levels differ."""
    import yaml

    from framework.core.twin import blank

    def twin(tp: int) -> str:
        fit = blank("sglang").with_values({"decode_step_us": 10000.0, "prefill_base_us": 50000.0})
        path = tmp_path / f"twin_tp{tp}.yaml"
        path.write_text(yaml.safe_dump(fit.model_copy(update={"fixed": {"tp_size": tp}}).model_dump(mode="json")))
        return str(path)

    assert not check(conds(("a", []), ("b", []), profile=twin(8))).refused
    (finding,) = check(conds(("a", []), profile=twin(1))).refused
    assert finding.flag == "--tp-size" and "fixed at 1" in finding.line()
    assert "differs between levels" not in finding.line() and "is set in [f=a]" in finding.line()
