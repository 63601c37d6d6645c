"""Could a measured bias move a decision? And the client's own bias, from its launches' self-checks. Pure.

A verdict compares geometric means of conditions; a multiplicative bias of up to `b` in every
condition stretches a ratio of two by up to (1 + b)^2 either way and a ratio of ratios by (1 + b)^4.
`could_move` asks whether the interval so stretched would reach a decision threshold it does not reach
now; the sim's clock check (servers/sim/fidelity.py) and the client's self-check both mark a verdict
UNRELIABLE when it could.

The client's self-check (framework.execution.client.selfcheck) leaves in each launch's workload row
(`client`) whether it was the bottleneck, whether it was saturated, and per metric the possible
relative bias of its figures. A metric built on wall-clock reads (TTFT, TPOT, decode, e2e, the
throughputs, inter-token gaps, SLO figures) is moved by it; counts (completion tokens, accept length)
are not. A saturated client bounds nothing (its delays can grow along a stream), so every verdict on
such a metric is marked; otherwise those its worst launch's bias could move are.
"""

from __future__ import annotations

from typing import Any

from framework.core.metrics import base_metric
from framework.core.spec import Hypothesis

CLIENT_METRICS = ("ttft_s", "tpot_s", "decode_tok_s", "e2e_s", "output_tok_s")


def could_move(h: Hypothesis, prediction: dict[str, Any], bias: float) -> bool:
    """Would the interval, stretched by the bias of every condition in the ratio, reach a decision threshold
    it does not reach now? A ratio of two conditions can be off by 2x the bias, a ratio of ratios by 4x."""
    ci = prediction.get("ci")
    if not ci or prediction.get("kind") == "launches":
        return False
    spec = next((p for p in h.predictions if p.id == prediction.get("id")), None)
    if spec is None:
        return True
    n = 4 if prediction.get("kind") == "interaction" else 2
    stretch = (1 + bias) ** n
    lo, hi = float(ci[0]), float(ci[1])
    thresholds = {1.0}
    for attr in ("margin", "min_effect"):
        value = getattr(spec, attr, None)
        if value:
            thresholds |= {1.0 + value, 1.0 - value, 1.0 / (1.0 + value)}
    return any((lo / stretch <= t < lo) or (hi < t <= hi * stretch) for t in thresholds)


def client_keys(metric: str) -> tuple[str, ...]:
    """The self-check's bias keys a metric depends on (none: the client's reads cannot move it)."""
    if metric in ("goodput", "slo_attainment"):
        return ("ttft_s", "tpot_s", "e2e_s")
    base = base_metric(metric)
    if base == "itl_s":
        return ("tpot_s",)
    return (base,) if base in CLIENT_METRICS else ()


def client_bias(workload_rows: list[dict[str, Any]], metric: str) -> dict[str, Any] | None:
    """Over the launches whose client said it was the bottleneck: how many, which were saturated, and the
    worst possible bias of `metric` among them. None when no launch's client fell behind or `metric` does
    not depend on its reads."""
    keys = client_keys(metric)
    flagged = [w for w in workload_rows if (w.get("client") or {}).get("bottleneck")]
    if not keys or not flagged:
        return None
    worst = None
    for w in flagged:
        for k in keys:
            value = ((w["client"].get("bias") or {}).get(k))
            if value is not None and (worst is None or value > worst):
                worst = float(value)
    saturated = [w["launch_id"] for w in flagged if w["client"].get("saturated")]
    return {"metric": metric, "launches": [w["launch_id"] for w in flagged], "saturated": saturated, "bias": worst}


def client_marks(h: Hypothesis, prediction: dict[str, Any], summary: dict[str, Any] | None) -> list[str]:
    """The mark a verdict carries when the client's lateness could move it (a saturated client: always)."""
    if not summary or prediction.get("kind") == "launches" or not prediction.get("ci"):
        return []
    if summary["saturated"]:
        return [f"UNRELIABLE: the client was saturated in {len(summary['saturated'])} launch(es): its "
                f"{summary['metric']} may be off by more than the {summary['bias'] or 0:.1%} its reads show"]
    if summary["bias"] and could_move(h, prediction, summary["bias"]):
        return [f"UNRELIABLE: the client's read delays (up to {summary['bias']:.1%} in {summary['metric']}) "
                f"could move this decision"]
    return []
