"""The switches that tell one version of the decision rules from the next, as plain data.

Each field defaults to version 1's behaviour; a later version turns its changes on. The analysis
phases read the switches they own from the `RuleSet` they are given, so the code of every version
stays reachable and `audit` recomputes an old record exactly as it was decided. A new rule change
adds a field here (default: the old behaviour), turns it on in the newest version, and gets a line
in CHANGELOG.md.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RuleSet:
    """One version's switches; a field's default is version 1's behaviour."""

    version: int = 1
    # a condition a comparison needs with no usable value (every launch failed to start, or the metric is 0
    # or undefined in every launch) is "no data", like one that served nothing (framework.analysis.nodata)
    no_value_is_no_data: bool = False
    # A decided comparison whose effect changed during the run (an empty confidence sequence, or early
    # and late blocks that differ beyond chance) is inconclusive (analysis/drift.py; statistics.md s3).
    drift_check: bool = False
    # Zero observed spread: launches agreeing to 1e-6 relative (the measurement's resolution), not 1e-12.
    spread_floor: bool = False
    # Decided comparisons carry caveats that say why they may be wrong: rare launch modes unseen at
    # small n, launch distributions of different shape, survivors of a loss near the limit
    # (analysis/caveats.py). They change the reason, never the verdict.
    caveats: bool = False
    # An extension's record accounts for the whole chain of looks and for a switch of analysis.
    chain_extensions: bool = False
    # what a launch and a condition lost (CHANGELOG.md, rules version 2; docs/statistics.md, "What was lost")
    launch_end_fails: bool = False  # a launch whose launch_end row says ok: false (it crashed, cut, hung up or
    #                                 stalled while measured) is a failed launch, as one that did not start
    unmeasured_lost: bool = False  # an ok measured request without a value of the metric (its decode could not
    #                                be measured: one chunk, one token) counts toward the loss rule, with why
    ratio_rates: bool = False  # a launch's decode_tok_s, tpot_s and output_tok_s: the ratio of its requests'
    #                            totals (tokens / seconds), not the mean of their rates (docs/workloads.md)
    # The machine as a random effect (analysis/machines.py; statistics.md, "Machines"): a comparison whose
    # launches ran on two or more machines is decided on the machines' own contrasts (t, m - 1 df), one whose
    # conditions ran on different machines is inconclusive (confounded), and every verdict states the
    # machines it covers. With one machine nothing changes.
    machine_effect: bool = False
    # A verdict whose metric the client's own lateness could move (its self-check in the launches' workload
    # rows: saturated, or a read bias that stretches the interval across a threshold) is marked UNRELIABLE
    # beside it (analysis/bias.py); the verdict itself is unchanged.
    client_marks: bool = False
    # The measured window of output_throughput and request_throughput is (start, end] with 1 us edges
    # (core.metrics.WINDOW_EDGE_S): a request or token at the window's start, such as a closed loop's warm-up
    # request whose successor opens the window, is outside however its timestamps were rounded.
    window_edge: bool = False
    # Under `analysis: anytime`, a comparison whose launches ran on two or more machines is decided on a
    # confidence sequence with the machine as the unit (machine means at each round of blocks, t on m - 1 df,
    # round k at a * 6/(pi^2 k^2); framework.stats.anytime_machines), not on the pooled block contrasts.
    anytime_machines: bool = False
    # A request's tpot_s and decode_tok_s follow the field's definition, (e2e - ttft) / (n - 1) and its
    # inverse, not the client's first-to-last-read decode (analysis/fielddecode.py): a request whose tokens
    # came in one read keeps its decode, so with `ratio_rates` a launch's TPOT is sum(e2e - ttft) / sum(n - 1)
    # over all of its requests and losing the fast ones cannot move it (docs/workloads.md).
    field_decode: bool = False
    # Marks that inform (analysis/marks.py; statistics.md, "Marks that inform"): v2's rare-mode and shape
    # caveats are replaced by marks that fire on evidence (a launch mode in one condition, skewness or unequal
    # spreads beyond chance) where a mode of the size seen could carry the verdict across its threshold; the
    # record states once what no test can see (`details.estimand`). They change the reason, never the verdict.
    informative_marks: bool = False
    # A machine is what its hardware says (framework.core.machine.hardware_of: GPU UUIDs, else host and CPU),
    # not its label: two labels over one host, CPU and GPUs are one machine, named by both labels (issue 31).
    machine_by_hardware: bool = False
    # What a condition lost names why its failed requests failed, by error class (`losses.censored_why`:
    # connection refused, stream cut, ...), so a dead server reads as gone, not as cutting streams (issue 31).
    # It changes the reason, never the verdict.
    loss_causes: bool = False
    # The `outputs` prediction kind (analysis/outputs.py; statistics.md, "Outputs: an agreement rate over blocked
    # requests"): paired requests' generated tokens compared, with Korn-Graubard clustered Clopper-Pearson bounds
    # on the agreement rate. Before version 5 an outputs prediction is inconclusive (no rule for it).
    outputs_kind: bool = False
    # A bisection's probe is judged against the change the ends have shown (stats.bisection.ends_gap): "bad" when
    # its interval excludes every mean a version like the good end can have (-g, g half the ends' proven change),
    # not only 0; an interval excluding both ends' sides ends the bisection undecided ("between"; issue 36).
    bisect_gap: bool = False


_V2 = {"no_value_is_no_data": True, "drift_check": True, "spread_floor": True, "caveats": True,
       "chain_extensions": True, "launch_end_fails": True, "unmeasured_lost": True, "ratio_rates": True}

# version 3 (framework 0.3.0): version 2 plus the switches CHANGELOG.md lists under rules version 3
_V3 = {**_V2, "machine_effect": True, "client_marks": True}

# version 4 (framework 0.3.0): version 3 plus the switches CHANGELOG.md lists under rules version 4
_V4 = {**_V3,
       "window_edge": True,
       "anytime_machines": True,
       "field_decode": True,
       "informative_marks": True,
       "machine_by_hardware": True,
       "loss_causes": True,
       }

# version 5 (framework 0.3.0): version 4 plus the switches CHANGELOG.md lists under rules version 5
_V5 = {**_V4,
       "outputs_kind": True,
       "bisect_gap": True,
       }

RULESETS: dict[int, RuleSet] = {
    1: RuleSet(version=1),
    2: RuleSet(version=2, **_V2),
    3: RuleSet(version=3, **_V3),
    4: RuleSet(version=4, **_V4),
    5: RuleSet(version=5, **_V5),
}
LATEST = max(RULESETS)
