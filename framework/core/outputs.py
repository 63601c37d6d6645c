"""What an `outputs` prediction needs of a design: the same prompts in the conditions it compares.

An outputs prediction (core.spec.Outputs) pairs a level's requests with its reference's on the same prompt
(framework.analysis.outputs). Prompts are drawn from each launch's seed unless the workload fixes
`prompt_seed`; then every launch of every condition sends the same prompts, lengths and dataset rows. This
module says, before anything starts, whether the compared conditions can pair, and which conditions must keep
their generated tokens. Pure.
"""

from __future__ import annotations

from framework.core import design
from framework.core.design import Condition, matching
from framework.core.spec import Experiment, Hypothesis, Outputs

# what decides the prompts a condition sends (temperature and the rest may differ: that is what is compared)
PROMPT_FIELDS = ("prompt_seed", "prompt_tokens", "output_tokens", "prompt", "dataset", "shared_prefix", "endpoint")


def pairs(h: Hypothesis, p: Outputs) -> list[tuple[Condition, Condition]]:
    """(level, reference) condition pairs the prediction compares: one, the factor's, at its `where`."""
    conds = design.conditions(h)
    ref = h.factors[p.factor].reference
    level = matching(conds, {**p.where, p.factor: p.level})
    base = matching(conds, {**p.where, p.factor: ref})
    return list(zip(level, base, strict=False))


def pairing_problem(h: Hypothesis, exp: Experiment) -> tuple[str, str] | None:
    """(field, message) for the first outputs prediction whose conditions cannot pair prompts, else None."""
    for i, p in enumerate(h.predictions):
        if not isinstance(p, Outputs):
            continue
        for treat, base in pairs(h, p):
            wt, wb = design.workload_for(h, exp, treat), design.workload_for(h, exp, base)
            if wt.prompt_seed is None or wb.prompt_seed is None:
                return (f"predictions[{i}]",
                        f"an outputs prediction pairs requests on their prompts, but [{treat.label()}] and "
                        f"[{base.label()}] draw prompts from each launch's seed: set workload.prompt_seed "
                        f"(e.g. prompt_seed: 1) so both send the same prompts")
            differ = [f for f in PROMPT_FIELDS if getattr(wt, f) != getattr(wb, f)]
            if differ:
                return (f"predictions[{i}]",
                        f"an outputs prediction pairs requests on their prompts, but [{treat.label()}] and "
                        f"[{base.label()}] differ in workload.{differ[0]}; only what is generated may differ "
                        f"(e.g. temperature), not the prompts")
    return None


def capture_conditions(h: Hypothesis) -> set[int]:
    """Indices of the conditions whose generated tokens an outputs prediction compares (kept by the client)."""
    out: set[int] = set()
    for p in h.predictions:
        if isinstance(p, Outputs):
            for treat, base in pairs(h, p):
                out |= {treat.index, base.index}
    return out
