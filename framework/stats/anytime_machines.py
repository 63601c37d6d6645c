"""Anytime-valid inference with the machine as the unit: a confidence sequence for a fleet's effect.

Why: the block-contrast e-process (framework.stats.anytime) treats every block as an independent draw of
the effect. When the blocks ran on m machines and the effect itself differs between machines (a machine
x configuration term g_j, sd tau), the blocks of one machine share g_j, and a claim about the fleet's
mean effect has m, not n, independent units: the pooled sequence then decides on the machines at hand
(A/A over 2 machines, tau = 0.1: false "increase" 19.5% and false "decrease" 20.0% at alpha 0.05).

What (rules version 4, `RuleSet.anytime_machines`; docs/statistics.md, "Anytime with machines"): the
looks are the rounds k = 1, 2, ... at which every one of the m machines has k complete blocks. At round
k each machine's contrast is the mean of its first k block contrasts, d_j(k), and under the model of
framework.analysis.machines (normal, balanced) d_1(k), ..., d_m(k) are i.i.d. N(mu, tau^2 + s^2 / k), so

    T_k(theta) = sqrt(m) (mean_j d_j(k) - theta) / sd_j(d_j(k))  ~  t_{m-1}  at mu = theta,

exactly, at every k (the machine-means rule of rules version 3, at one round). Round k is tested at the
level a * w_k with w_k = 6 / (pi^2 k^2) (sum over k >= 1 of w_k = 1, fixed before any calibration): by
the union bound the probability that any round's one-sided bound misses mu is at most a, whatever the
stopping rule and however far the run is extended (a Bonferroni confidence sequence; Darling & Robbins
1967 used the same sum-of-levels construction). The bounds are the running intersections over rounds and
the p-value min(1, min_k p_k / w_k). It is conservative (the rounds' statistics are strongly correlated);
with two machines (1 df) it rarely decides, which is what two machines can say about a fleet. Pure
functions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
from scipy import stats as sps


def round_weight(k: int) -> float:
    """w_k = 6 / (pi^2 k^2): the share of alpha spent at round k (k >= 1); the w_k sum to 1."""
    return 6.0 / (math.pi ** 2 * k * k)


@dataclass
class MachineSequence:
    """The fleet's log effect from per-machine block contrasts, with anytime-valid bounds and p-values.

    `by_machine` maps a machine id to its block contrasts in block order (decisions' LogEffect interface:
    estimate, bounds, p_above, p_below, method, extra).
    """

    by_machine: dict[str, list[float]]
    method: str = "anytime"
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.by_machine) < 2:
            raise ValueError("the machine-level anytime analysis needs at least 2 machines")
        rounds = min(len(c) for c in self.by_machine.values())
        if rounds < 1:
            raise ValueError("every machine needs at least one complete block")
        c = np.array([list(v)[:rounds] for _, v in sorted(self.by_machine.items())], float)  # m x rounds
        self.m, self.rounds = c.shape
        d = np.cumsum(c, axis=1) / np.arange(1, self.rounds + 1)[None, :]  # d_j(k), one column per round
        self._means = d.mean(axis=0)
        self._sds = d.std(axis=0, ddof=1)
        self.estimate = float(self._means[-1])
        self.df = float(self.m - 1)
        self.extra = {"unit": "machine", "machines": int(self.m), "rounds": int(self.rounds),
                      "spending": "a * 6 / (pi^2 k^2) at round k",
                      "machine_effects": {mach: float(x) for mach, x in zip(sorted(self.by_machine), d[:, -1],
                                                                                 strict=True)},
                      **self.extra}

    def _looks(self) -> list[int]:
        """Rounds with a spread between machines (no spread: no evidence at that round)."""
        return [k for k in range(1, self.rounds + 1) if self._sds[k - 1] > 0]

    def bounds(self, a: float) -> tuple[float, float]:
        """Running intersection over rounds of the one-sided (1 - a w_k) t bounds on m - 1 df."""
        lo, hi = -math.inf, math.inf
        for k in self._looks():
            q = float(sps.t.ppf(1.0 - a * round_weight(k), self.m - 1))
            half = q * float(self._sds[k - 1]) / math.sqrt(self.m)
            lo, hi = max(lo, float(self._means[k - 1]) - half), min(hi, float(self._means[k - 1]) + half)
        return float(lo), float(hi)

    def _p(self, theta: float, sign: float) -> float:
        best = 1.0
        for k in self._looks():
            t = math.sqrt(self.m) * sign * (float(self._means[k - 1]) - theta) / float(self._sds[k - 1])
            best = min(best, float(sps.t.sf(t, self.m - 1)) / round_weight(k))
        return float(min(1.0, best))

    def p_above(self, theta: float) -> float:
        """Anytime p-value of H0: effect <= theta."""
        return self._p(theta, +1.0)

    def p_below(self, theta: float) -> float:
        """Anytime p-value of H0: effect >= theta."""
        return self._p(theta, -1.0)


def machine_block_contrasts(cells: Sequence[dict[tuple[str, Any], float]], weights: Sequence[float]
                            ) -> dict[str, list[float]]:
    """Per machine, the contrasts of the blocks every cell measured on that machine, in block order:
    cells[i] maps (machine, block) to a log launch value (a block whose cells ran on different machines
    has no within-machine contrast and is left out)."""
    common = sorted(set.intersection(*(set(c) for c in cells)), key=lambda k: (k[0], str(type(k[1])), k[1]))
    out: dict[str, list[float]] = {}
    for key in common:
        out.setdefault(key[0], []).append(float(sum(w * c[key] for w, c in zip(weights, cells, strict=True))))
    return out
