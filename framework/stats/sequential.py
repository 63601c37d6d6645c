"""Group-sequential boundaries: Lan-DeMets alpha spending over a planned maximum number of looks.

Why group-sequential: a run adds launches in blocks, so the looks are few (max_launches / block,
typically 5-10) and known in advance, and the samples are tiny (2-20 launches per condition) with an
unknown variance. Alpha spending (Lan & DeMets 1983) controls the error over exactly the looks a run
plans and, with the O'Brien-Fleming-type spending function (O'Brien & Fleming 1979), spends almost
nothing at the first looks, so the final look keeps nearly the fixed design's level (and power); on
the seed's effects it needs fewer launches than the anytime-valid rule (`stats.anytime`), which is
the one to register when looks or extensions are not planned (docs/statistics.md, section 10).

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
_LOWER = -10.0  # the continuation region's lower end for W(t): the mass below it is negligible


def _pdf(x: np.ndarray) -> np.ndarray:
    return np.exp(-0.5 * x * x) * (1.0 / math.sqrt(2.0 * math.pi))


def _trapezoid_mass(w: np.ndarray, dens: np.ndarray) -> np.ndarray:
    """Probability mass of each grid point of a sub-density (trapezoid rule)."""
    weights = np.full(len(w), w[1] - w[0])
    weights[0] *= 0.5
    weights[-1] *= 0.5
    return dens * weights


def _propagate(w: np.ndarray, mass: np.ndarray, c_next: float, dt: float, drift: float,
               grid: int) -> tuple[np.ndarray, np.ndarray]:
    """Sub-density of W at the next look on (_LOWER, c_next), from the mass that did not cross before."""
    sd = math.sqrt(dt)
    new_w = np.linspace(_LOWER, c_next, grid)
    return new_w, _pdf((new_w[:, None] - w[None, :] - drift * dt) / sd) @ mass / sd


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
    w = np.linspace(_LOWER, zs[0] * math.sqrt(ts[0]), grid)
    dens = _pdf(w / math.sqrt(ts[0])) / math.sqrt(ts[0])
    for k in range(1, max_looks):
        dt = ts[k] - ts[k - 1]
        sd = math.sqrt(dt)
        mass = _trapezoid_mass(w, dens)
        target = cum[k] - cum[k - 1]
        if target <= 1e-300:
            zk = _Z_MAX
        else:
            def cross(z: float) -> float:  # noqa: B023 - solved within this iteration (brentq below)
                ck = z * math.sqrt(ts[k])  # noqa: B023
                return float(np.sum(mass * special.ndtr((w - ck) / sd))) - target  # noqa: B023

            if cross(_Z_MAX) > 0:
                zk = _Z_MAX
            elif cross(-10.0) < 0:
                zk = -10.0
            else:
                zk = float(optimize.brentq(cross, -10.0, _Z_MAX, xtol=1e-10))
        zs.append(min(zk, _Z_MAX))
        w, dens = _propagate(w, mass, zs[-1] * math.sqrt(ts[k]), dt, 0.0, grid)
    return tuple(zs)


def nominal_alpha(look: int, max_looks: int, alpha: float, kind: str = "obf") -> float:
    """The one-sided level each test uses at `look` (1-based); looks past the last use the last."""
    k = min(max(look, 1), max_looks)
    return float(special.ndtr(-boundaries(float(alpha), int(max_looks), kind)[k - 1]))


@lru_cache(maxsize=256)
def crossing_probability(alpha: float, max_looks: int, drift: float, kind: str = "obf", grid: int = 801) -> float:
    """P(the one-sided test crosses its boundary at some look) when Z at full information has mean `drift`.

    The score process is S(t) = W(t) + drift * t and look k rejects when S(t_k) >= z_k * sqrt(t_k);
    the same recursive integration as `boundaries`, with the drift in each increment. At drift 0
    this is the alpha spent in total (= alpha); at the fixed design's drift z_{1-a} + z_{power}
    it is the sequential design's power with the fixed design's sample size.
    """
    zs = boundaries(float(alpha), int(max_looks), kind, grid)
    ts = [k / max_looks for k in range(1, max_looks + 1)]
    c = zs[0] * math.sqrt(ts[0])
    crossed = float(special.ndtr((drift * ts[0] - c) / math.sqrt(ts[0])))
    w = np.linspace(_LOWER, c, grid)
    dens = _pdf((w - drift * ts[0]) / math.sqrt(ts[0])) / math.sqrt(ts[0])
    for k in range(1, max_looks):
        dt = ts[k] - ts[k - 1]
        mass = _trapezoid_mass(w, dens)
        ck = zs[k] * math.sqrt(ts[k])
        crossed += float(np.sum(mass * special.ndtr((w + drift * dt - ck) / math.sqrt(dt))))
        w, dens = _propagate(w, mass, ck, dt, drift, grid)
    return crossed


@lru_cache(maxsize=256)
def inflation_factor(alpha: float, max_looks: int, power: float = 0.9, kind: str = "obf") -> float:
    """R = N_max / n_fixed: how much larger the sequential design's cap must be to keep the fixed design's power.

    The fixed design with n_fixed has drift d_f = z_{1-alpha} + z_{power}; the group-sequential test
    reaches `power` at the drift d_s solving crossing_probability(d_s) = power, and drift grows with
    the square root of the sample size, so R = (d_s / d_f)^2 (Jennison & Turnbull 2000, ch. 2 and 7;
    about 1.02-1.03 for O'Brien-Fleming-type spending over 2-10 looks, 1.1-1.2 for Pocock-type).
    """
    if max_looks <= 1:
        return 1.0
    d_f = float(stats.norm.isf(alpha) + stats.norm.ppf(power))
    d_s = optimize.brentq(lambda d: crossing_probability(alpha, max_looks, d, kind) - power, d_f, 2 * d_f,
                          xtol=1e-7)
    return float((d_s / d_f) ** 2)


def sequential_cap(fixed_launches: int, block: int, alpha: float, power: float = 0.9, kind: str = "obf") -> int:
    """The default cap of a sequential run: the fixed design's launches times the inflation factor.

    The smallest whole number of blocks N with N >= R(K) * fixed_launches, K = N / block looks, so the
    sequential run has (at least) the power the fixed design was planned for, and looks at equally
    spaced information fractions, as the boundaries assume. Textbook group-sequential sizing
    (Jennison & Turnbull 2000, ch. 2): the cap follows from the fixed design, not from the data.
    """
    if fixed_launches < 1 or block < 1:
        raise ValueError("fixed_launches and block must be >= 1")
    n = block * math.ceil(fixed_launches / block)  # R >= 1: no smaller cap can do
    while n < inflation_factor(float(alpha), n // block, power, kind) * fixed_launches - 1e-9:
        n += block
    return n


_P_TABLE_ALPHAS = tuple(float(a) for a in np.geomspace(1e-8, 0.49, 49))


@lru_cache(maxsize=64)
def _nominal_table(max_looks: int, kind: str) -> np.ndarray:
    """log nominal levels a_k(alpha), rows = the table's alphas, columns = looks (a coarser grid: p-values only)."""
    rows = [[float(special.log_ndtr(-z)) for z in boundaries(a, int(max_looks), kind, 201)]
            for a in _P_TABLE_ALPHAS]
    return np.asarray(rows)


def repeated_p_value(p_nominal: float, look: int, max_looks: int, kind: str = "obf") -> float:
    """The repeated p-value (Jennison & Turnbull 2000, ch. 9): the smallest alpha whose look-`look` level admits p.

    `p_nominal` is the fixed-sample one-sided p of the look's test; the repeated p-value is
    inf{alpha : p_nominal <= a_look(alpha)}, with a_k(alpha) the nominal level of look k under alpha
    spending. P(some look's repeated p <= alpha) <= alpha whatever the stopping rule, so it is a valid
    p-value for multiplicity adjustments across sequential jobs. Found by log-log interpolation on a
    table of 49 alphas from 1e-8 to 0.49 (below 1e-8 it reports 1e-8, an upper bound; above 0.49, 1).
    """
    if not math.isfinite(p_nominal) or p_nominal >= 1:
        return 1.0
    if max_looks <= 1:
        return float(max(p_nominal, 0.0))
    k = min(max(look, 1), max_looks)
    col = _nominal_table(int(max_looks), kind)[:, k - 1]  # increasing in alpha
    lp = math.log(max(p_nominal, 1e-300))
    if lp <= col[0]:
        return _P_TABLE_ALPHAS[0]
    if lp > col[-1]:
        return 1.0
    la = np.log(np.asarray(_P_TABLE_ALPHAS))
    return float(min(1.0, math.exp(float(np.interp(lp, col, la)))))
