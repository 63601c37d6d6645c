"""Which verdicts the client's lateness marks: all on a metric it times when it was saturated, else those
its worst launch's bias could move; none on counts, none when no launch's client fell behind."""

from __future__ import annotations

from cli_helpers import ROOT

from framework.analysis.bias import client_bias, client_keys, client_marks
from framework.core.spec import load_hypothesis

H = load_hypothesis(ROOT / "hypotheses" / "eagle3_allreduce.yaml")  # metric decode_tok_s
NEUTRAL = {"id": "neutral_for_baseline", "kind": "equivalent", "ci": [0.985, 1.02]}  # margin 0.03


def _workload(launch: str, *, bottleneck: bool, saturated: bool = False, bias: float | None = None) -> dict:
    return {"kind": "workload", "launch_id": launch, "client": {
        "bottleneck": bottleneck, "saturated": saturated, "bias": {"decode_tok_s": bias, "tpot_s": bias}}}


def test_metrics_the_client_times_and_those_it_does_not():
    assert client_keys("decode_tok_s") == ("decode_tok_s",) and client_keys("itl_s.p99") == ("tpot_s",)
    assert client_keys("output_throughput") == ("e2e_s",) and client_keys("ttft_s.p90") == ("ttft_s",)
    assert client_keys("accept_length") == () and client_keys("completion_tokens") == ()


def test_only_launches_whose_client_fell_behind_count_and_the_worst_bias_is_kept():
    rows = [_workload("a", bottleneck=False, bias=0.5), _workload("b", bottleneck=True, bias=0.02),
            _workload("c", bottleneck=True, bias=0.004)]
    summary = client_bias(rows, "decode_tok_s")
    assert summary["launches"] == ["b", "c"] and summary["bias"] == 0.02 and summary["saturated"] == []
    assert client_bias(rows[:1], "decode_tok_s") is None and client_bias(rows, "accept_length") is None


def test_a_bias_marks_the_verdicts_it_could_move_and_saturation_marks_all():
    small = client_bias([_workload("b", bottleneck=True, bias=0.001)], "decode_tok_s")
    large = client_bias([_workload("b", bottleneck=True, bias=0.02)], "decode_tok_s")
    saturated = client_bias([_workload("b", bottleneck=True, saturated=True, bias=0.001)], "decode_tok_s")
    helps = {"id": "helps_eagle3", "kind": "increase", "ci": [1.75, 1.88]}
    assert client_marks(H, NEUTRAL, small) == []
    assert client_marks(H, NEUTRAL, large)[0].startswith("UNRELIABLE: the client's read delays (up to 2.0%")
    assert client_marks(H, helps, large) == []  # 2% cannot carry 1.75 across 1.10
    assert client_marks(H, helps, saturated)[0].startswith("UNRELIABLE: the client was saturated in 1 launch")
    assert client_marks(H, {"id": "x", "kind": "launches", "ci": None}, saturated) == []


def test_a_criterion_1_record_is_read_as_it_was_written_beside_a_criterion_2_one():
    """Criterion 1 (rows without `criterion`) marked a busy loop saturated; criterion 2 never does. Analysis
    reads what each row says, so an old record's marks do not change and a new one's come from its bias."""
    old = {**_workload("a", bottleneck=True, saturated=True, bias=0.001)}
    new = _workload("b", bottleneck=True, bias=0.001)
    new["client"].update(criterion=2)
    helps = {"id": "helps_eagle3", "kind": "increase", "ci": [1.75, 1.88]}
    assert client_marks(H, helps, client_bias([old], "decode_tok_s"))[0].startswith("UNRELIABLE: the client was "
                                                                                   "saturated")
    assert client_marks(H, helps, client_bias([new], "decode_tok_s")) == []
