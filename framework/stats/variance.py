"""Variance components of a condition: between launches and within a launch (log request values).

Why: the launch, not the request, is the unit of replication. Requests of one launch share its
offset, so n launches x m requests carry far less information than n*m independent requests. The
one-way random-effects model  log y_ij = mu + a_i + e_ij,  a_i ~ (0, s_b^2), e_ij ~ (0, s_w^2)
quantifies how much: the intraclass correlation ICC = s_b^2 / (s_b^2 + s_w^2), the design effect
1 + (m - 1) ICC (Kish 1965: the factor by which clustering inflates the variance of a mean over
requests), and the cost-optimal number of requests per launch of two-stage sampling (Cochran 1977,
sec. 10.6):  m* = sqrt((c_launch / c_request) * (s_w^2 / s_b^2)).

Estimates are the ANOVA / method-of-moments ones (unbiased, closed form, valid for unequal
launch sizes via n0), with s_b^2 truncated at 0 when the between mean square is below the within
one. Pure functions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np


@dataclass(frozen=True)
class Components:
    launches: int  # groups with at least one value
    requests: int  # values in all
    mean_requests: float  # mean values per launch (m in the design effect)
    n0: float  # the "effective" group size of the unbalanced ANOVA
    ms_between: float | None
    ms_within: float | None
    var_between: float | None  # s_b^2 (log scale), truncated at 0
    var_within: float | None  # s_w^2 (log scale)
    icc: float | None
    design_effect: float | None

    @property
    def sd_between(self) -> float | None:
        return None if self.var_between is None else math.sqrt(self.var_between)

    @property
    def sd_within(self) -> float | None:
        return None if self.var_within is None else math.sqrt(self.var_within)

    def as_dict(self) -> dict:
        d = {f: getattr(self, f) for f in self.__dataclass_fields__}
        d["sd_between"], d["sd_within"] = self.sd_between, self.sd_within
        return d


def _from_sums(ssb: float, dfb: int, ssw: float, dfw: int, n0: float, k: int, total: int) -> Components:
    msb = ssb / dfb if dfb > 0 else None
    msw = ssw / dfw if dfw > 0 else None
    vb = max(0.0, (msb - msw) / n0) if (msb is not None and msw is not None and n0 > 0) else None
    vw = msw
    icc = vb / (vb + vw) if (vb is not None and vw is not None and vb + vw > 0) else None
    m = total / k if k else 0.0
    deff = design_effect(m, icc) if icc is not None else None
    return Components(k, total, m, n0, msb, msw, vb, vw, icc, deff)


def _sums(groups: Sequence[Sequence[float]]) -> tuple[float, float, int, int, float]:
    """(SS between launches, SS within launches, launches, values, sum of squared launch sizes)."""
    gs = [g for g in groups if len(g) > 0]
    if not gs:
        return 0.0, 0.0, 0, 0, 0.0
    ns = np.fromiter((len(g) for g in gs), float, len(gs))
    flat = np.fromiter((v for g in gs for v in g), float, int(ns.sum()))
    starts = np.concatenate(([0], np.cumsum(ns)[:-1])).astype(int)
    means = np.add.reduceat(flat, starts) / ns
    grand = float(flat.mean())
    ssb = float(np.sum(ns * (means - grand) ** 2))
    ssw = float(np.sum((flat - np.repeat(means, ns.astype(int))) ** 2))
    return ssb, ssw, len(gs), int(ns.sum()), float(np.sum(ns * ns))


def components(groups: Sequence[Sequence[float]]) -> Components:
    """One-way random-effects ANOVA estimates from log values grouped by launch."""
    ssb, ssw, k, total, n2 = _sums(groups)
    if k == 0:
        return Components(0, 0, 0.0, 0.0, None, None, None, None, None, None)
    n0 = (total - n2 / total) / (k - 1) if k > 1 else 0.0
    return _from_sums(ssb, k - 1, ssw, total - k, n0, k, total)


def pooled_components(conditions: Sequence[Sequence[Sequence[float]]]) -> Components:
    """Nested ANOVA over conditions (fixed) and launches within conditions (random).

    The between-launch and within-launch sums of squares are taken within each condition and pooled,
    so differences between conditions do not inflate s_b^2; n0 is the nested design's
    (sum_c N_c - sum_c sum_i n_ci^2 / N_c) / sum_c (k_c - 1).
    """
    ssb = ssw = n0_num = 0.0
    dfb = dfw = k_all = total = 0
    for groups in conditions:
        b, w, k, n_c, n2 = _sums(groups)
        if k == 0:
            continue
        ssb += b
        ssw += w
        dfb += k - 1
        dfw += n_c - k
        n0_num += n_c - n2 / n_c
        k_all += k
        total += n_c
    if k_all == 0:
        return Components(0, 0, 0.0, 0.0, None, None, None, None, None, None)
    n0 = n0_num / dfb if dfb > 0 else 0.0
    return _from_sums(ssb, dfb, ssw, dfw, n0, k_all, total)


def design_effect(m: float, icc: float) -> float:
    """Kish's design effect of a mean over m requests per launch: 1 + (m - 1) ICC."""
    return 1.0 + (m - 1.0) * icc


def optimal_requests(var_between: float, var_within: float, launch_cost_s: float, request_cost_s: float) -> float:
    """Cost-optimal requests per launch m* = sqrt((c_launch / c_request) (s_w^2 / s_b^2)).

    Returns inf when s_b^2 = 0 (no launch-level noise: spend everything on requests) and 0 when
    s_w^2 = 0. Round up and keep at least 1 when using it.
    """
    if request_cost_s <= 0 or launch_cost_s < 0:
        raise ValueError("costs must be positive")
    if var_between <= 0:
        return math.inf
    return math.sqrt((launch_cost_s / request_cost_s) * (var_within / var_between))

