"""Group-sequential boundaries: Lan-DeMets alpha spending over a planned maximum number of looks.

Why group-sequential (and not confidence sequences): a run adds launches in blocks, so the looks are
few (max_launches / block, typically 5-10) and known in advance, and the samples are tiny (2-20
launches per condition) with an unknown variance. Anytime-valid confidence sequences (Howard et al.
2021) buy validity at every sample size, which we do not need, at the price of wider intervals at
the sample sizes we have; their sub-Gaussian or asymptotic forms also need a known scale or large
samples. Alpha spending (Lan & DeMets 1983) controls the error over exactly the looks a run makes
and, with the O'Brien-Fleming-type spending function (O'Brien & Fleming 1979), spends almost nothing
at the first looks, so the final look keeps nearly the fixed design's level (and power).

Each one-sided test of a prediction (the one that would make it "supported" and the one that would
make it "refuted") gets its own boundary sequence from the same spending function; the two are
non-binding for each other, which only makes each error smaller. A look's boundary z_k on the
normal scale becomes a nominal one-sided level a_k = 1 - Phi(z_k), applied to the t-based (or rank,
or bootstrap) interval at that look - the usual small-sample approximation, checked by the
calibration benchmark. Boundaries are computed by the recursive numerical integration of Armitage,
McPherson & Rowe (1969) on a fixed grid, so they are deterministic (an audit recomputes them
exactly). Pure functions, cached.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from scipy import optimize, special, stats

SPENDING = ("obf", "pocock")


def spend(t: float, alpha: float, kind: str = "obf") -> float:
    """Cumulative one-sided alpha spent by information fraction t in [0, 1]."""
    if t <= 0:
        return 0.0
    t = min(t, 1.0)
    if kind == "obf":  # Lan & DeMets 1983, O'Brien-Fleming type
        return float(2.0 - 2.0 * stats.norm.cdf(stats.norm.ppf(1 - alpha / 2) / math.sqrt(t)))
    if kind == "pocock":  # Lan & DeMets 1983, Pocock type
        return float(alpha * math.log(1 + (math.e - 1) * t))
    raise ValueError(f"unknown spending function {kind!r}; allowed: {list(SPENDING)}")


_Z_MAX = 38.0  # boundaries above this mean "no alpha spent here"


@lru_cache(maxsize=256)
def boundaries(alpha: float, max_looks: int, kind: str = "obf", grid: int = 801) -> tuple[float, ...]:
    """One-sided z boundaries for looks at information fractions k / max_looks, k = 1..max_looks.

    Under H0 the z statistics at the looks are a Brownian motion W(t) / sqrt(t); the boundaries are
    chosen so that P(first crossing at look k) = spend(t_k) - spend(t_{k-1}).
    """
    if max_looks < 1:
        raise ValueError("max_looks must be >= 1")
    ts = [k / max_looks for k in range(1, max_looks + 1)]
    cum = [spend(t, alpha, kind) for t in ts]
    zs: list[float] = []
    inc = cum[0]
    z1 = float(stats.norm.isf(inc)) if inc > 0 else _Z_MAX
    zs.append(min(z1, _Z_MAX))
    if max_looks == 1:
        return tuple(zs)
    # sub-density of W(t_1) on the continuation region (-L, c_1), on a grid
    lower = -10.0
    c = zs[0] * math.sqrt(ts[0])
    w = np.linspace(lower, c, grid)
    dens = stats.norm.pdf(w, scale=math.sqrt(ts[0]))
    for k in range(1, max_looks):
        dt = ts[k] - ts[k - 1]
        sd = math.sqrt(dt)
        weights = np.full(grid, (w[1] - w[0]))
        weights[0] *= 0.5
        weights[-1] *= 0.5
        mass = dens * weights
        target = cum[k] - cum[k - 1]
        if target <= 1e-300:
            zk = _Z_MAX
        else:
            def cross(z: float) -> float:
                ck = z * math.sqrt(ts[k])
                return float(np.sum(mass * stats.norm.sf((ck - w) / sd))) - target

            if cross(_Z_MAX) > 0:
                zk = _Z_MAX
            elif cross(-10.0) < 0:
                zk = -10.0
            else:
                zk = float(optimize.brentq(cross, -10.0, _Z_MAX, xtol=1e-10))
        zs.append(min(zk, _Z_MAX))
        ck = zs[-1] * math.sqrt(ts[k])
        new_w = np.linspace(lower, ck, grid)
        dens = (mass[None, :] * stats.norm.pdf((new_w[:, None] - w[None, :]) / sd) / sd).sum(axis=1)
        w = new_w
    return tuple(zs)


def nominal_alpha(look: int, max_looks: int, alpha: float, kind: str = "obf") -> float:
    """The one-sided level each test uses at `look` (1-based); looks past the last use the last."""
    k = min(max(look, 1), max_looks)
    return float(special.ndtr(-boundaries(float(alpha), int(max_looks), kind)[k - 1]))
