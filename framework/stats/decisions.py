"""Decision rules: from a log-effect interval to a three-valued verdict with a one-line reason.

Every rule reads the two one-sided (1 - a) confidence bounds of the effect (together the two-sided
(1 - 2a) interval; `a` is alpha, or the per-look nominal alpha of a sequential design) and compares
them with the prediction's threshold(s) on the ratio scale:

- equivalent (TOST, Schuirmann 1987): supported iff the interval lies inside [1 - m, 1 + m];
  refuted iff it lies entirely outside; otherwise inconclusive. p = max of the two one-sided p.
- increase: supported iff the lower bound is above 1 + e; refuted iff the upper bound is below
  1 + e (the effect is significantly smaller than required); otherwise inconclusive.
- decrease: mirror image with 1 - e. Interactions use the same rules on the ratio of ratios.

Supported and refuted are each a one-sided level-a test, so each wrong call has probability at most
`a` at the boundary of its null. `launches` predictions are counts, not tests, except under
`analysis: anytime`, where they test the claimed rate with beta-binomial e-processes. Pure functions.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Literal, Sequence

from framework.stats.anytime import RateSequence, launches_to_support
from framework.stats.effects import LogEffect

Verdict = Literal["supported", "refuted", "inconclusive"]


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    reason: str
    estimate: float | None = None  # ratio
    ci: tuple[float, float] | None = None  # ratio scale, the interval the decision used
    p_value: float | None = None  # p of the test behind "supported" (small = evidence for it)
    details: dict[str, Any] = field(default_factory=dict)


def _f(x: float) -> str:
    if math.isinf(x):
        return "inf" if x > 0 else "0"
    return f"{x:.3f}" if 0.01 <= abs(x) < 1000 else f"{x:.3g}"


def _level(a: float) -> str:
    pct = 100 * (1 - 2 * a)
    text = f"{pct:.4f}".rstrip("0").rstrip(".")
    return f"{text}%"


def _exp(x: float) -> float:
    return math.inf if x > 700 else (0.0 if x < -700 else math.exp(x))


def _ratio_ci(lo: float, hi: float) -> tuple[float, float]:
    return _exp(lo), _exp(hi)


def _p(p: float) -> str:
    return f"p={p:.2g}" if p >= 1e-4 else "p<0.0001"


def _common(effect: LogEffect, a: float) -> tuple[float, float, float, tuple[float, float], str]:
    lo, hi = effect.bounds(a)
    ratio = math.exp(effect.estimate)
    ci = _ratio_ci(lo, hi)
    what = "confidence sequence" if effect.method == "anytime" else "CI"  # anytime-valid: holds at every n
    head = f"ratio {_f(ratio)}, {_level(a)} {what} [{_f(ci[0])}, {_f(ci[1])}]"
    return lo, hi, ratio, ci, head


def _num(x: float) -> float | None:
    """A finite float, or None (records are strict JSON: no infinities)."""
    return float(x) if math.isfinite(x) else None


def _details(effect: LogEffect, a: float, lo: float, hi: float, **more: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"method": effect.method, "one_sided_alpha": a, "ci_level": 1 - 2 * a,
                         "log_estimate": effect.estimate, "log_ci": [_num(lo), _num(hi)]}
    for name in ("se", "df"):
        if hasattr(effect, name):
            d[name] = _num(float(getattr(effect, name)))
    extra = getattr(effect, "extra", None)
    if extra:
        d.update(extra)
    d.update(more)
    return d


def equivalent(effect: LogEffect, margin: float, a: float) -> Decision:
    """TOST on the log scale with bounds log(1 - margin), log(1 + margin)."""
    low, upp = math.log(1 - margin), math.log(1 + margin)
    lo, hi, ratio, ci, head = _common(effect, a)
    p_low, p_upp = effect.p_above(low), effect.p_below(upp)
    p = max(p_low, p_upp)
    bounds = f"[{_f(1 - margin)}, {_f(1 + margin)}]"
    if lo > low and hi < upp:
        verdict, why = "supported", f"inside the equivalence bounds {bounds} (TOST {_p(p)})"
    elif hi < low or lo > upp:
        verdict, why = "refuted", f"entirely outside the equivalence bounds {bounds}"
    else:
        verdict, why = "inconclusive", f"overlaps an equivalence bound of {bounds} (TOST {_p(p)})"
    return Decision(verdict, f"{head} {why}", ratio, ci, p,
                    _details(effect, a, lo, hi, bounds=[1 - margin, 1 + margin], p_lower=p_low, p_upper=p_upp))


def directional(effect: LogEffect, threshold_ratio: float, direction: Literal["up", "down"], a: float,
                what: str = "ratio") -> Decision:
    """One-sided test against a minimum effect: `up` means ratio > threshold, `down` ratio < threshold."""
    theta = math.log(threshold_ratio)
    lo, hi, ratio, ci, head = _common(effect, a)
    if what != "ratio":
        head = head.replace("ratio ", f"{what} ", 1)
    t = _f(threshold_ratio)
    if direction == "up":
        p = effect.p_above(theta)
        if lo > theta:
            verdict, why = "supported", f"lower bound above {t} ({_p(p)})"
        elif hi < theta:
            verdict, why = "refuted", f"upper bound below {t}: the effect is significantly smaller than required"
        else:
            verdict, why = "inconclusive", f"contains the threshold {t} ({_p(p)})"
    else:
        p = effect.p_below(theta)
        if hi < theta:
            verdict, why = "supported", f"upper bound below {t} ({_p(p)})"
        elif lo > theta:
            verdict, why = "refuted", f"lower bound above {t}: the decrease is significantly smaller than required"
        else:
            verdict, why = "inconclusive", f"contains the threshold {t} ({_p(p)})"
    return Decision(verdict, f"{head} {why}", ratio, ci, p,
                    _details(effect, a, lo, hi, threshold=threshold_ratio, direction=direction))


def increase(effect: LogEffect, min_effect: float, a: float) -> Decision:
    return directional(effect, 1 + min_effect, "up", a)


def decrease(effect: LogEffect, min_effect: float, a: float) -> Decision:
    return directional(effect, 1 - min_effect, "down", a)


def interaction(effect: LogEffect, min_effect: float, direction: Literal["larger", "smaller"], a: float) -> Decision:
    if direction == "larger":
        return directional(effect, 1 + min_effect, "up", a, what="ratio of ratios")
    return directional(effect, 1 - min_effect, "down", a, what="ratio of ratios")


# --------------------------------------------------------------------------- launch outcomes


@dataclass(frozen=True)
class LaunchOutcome:
    launch_id: str
    ok: bool  # started (and, where requests were sent, served at least one)
    error: str | None = None
    log_tail: Sequence[str] = ()
    failure_class: str | None = None  # framework.execution.failures' class of a failed launch
    block: Any = None  # the launch's block (replicate): the anytime rule looks at block ends
    served_before_failing: int | None = None  # it started, served this many requests, then failed (None: it did not)


def _started_facts(outcomes: Sequence[LaunchOutcome], k: int, n: int) -> str:
    """'k/n launches started', or, when some of the others started and failed later, what they served first:
    a launch that served requests and then crashed did start ("failed after it served N requests")."""
    later = [o.served_before_failing for o in outcomes if not o.ok and o.served_before_failing is not None]
    if not later:
        return f"{k}/{n} launches started"
    served = ", ".join(str(x) for x in later[:-1]) + (" and " if len(later) > 1 else "") + str(later[-1])
    noun = "request" if later == [1] else "requests"
    who = "1 failed after it served" if len(later) == 1 else f"{len(later)} failed after they served"
    return f"{k + len(later)}/{n} launches started, {k} served their workload; {who} {served} {noun}"


def _failure_line(o: LaunchOutcome, pattern: re.Pattern[str] | None) -> str | None:
    lines = ([o.error] if o.error else []) + [ln for ln in o.log_tail if ln]
    if pattern is not None:
        for ln in lines:
            if pattern.search(ln):
                return ln.strip()
        return None
    return lines[0].strip() if lines else None


def _quote(line: str | None, limit: int = 160) -> str:
    if not line:
        return "(no message captured)"
    line = line if len(line) <= limit else line[: limit - 3] + "..."
    return repr(line)


def _matched(outcomes: Sequence[LaunchOutcome], expect: Literal["starts", "fails"], match: str | None,
             failure_class: str | None) -> tuple[list[bool], str | None, str | None]:
    """Which launches had the expected outcome, the first captured failure line, the first other failure."""
    pattern = re.compile(match) if match else None
    matched, captured, other = [], None, None
    for o in outcomes:
        if expect == "starts":
            ok = o.ok
            if not o.ok and other is None:
                other = _failure_line(o, None)
        else:
            line = _failure_line(o, pattern) if not o.ok else None
            ok = (not o.ok) and (pattern is None or line is not None)
            ok = ok and (failure_class is None or o.failure_class == failure_class)
            if ok and captured is None:
                captured = line
            if not ok and not o.ok and other is None:
                other = _failure_line(o, None)
        matched.append(ok)
    return matched, captured, other


def launches(outcomes: Sequence[LaunchOutcome], expect: Literal["starts", "fails"], match: str | None,
             failure_class: str | None = None, *, rate: float = 0.5, a: float | None = None) -> Decision:
    """Launch outcomes: counts, or (with `a`, under `analysis: anytime`) a test of the claimed `rate`.

    Counts: supported iff all match, refuted iff none, else inconclusive (flaky). A failure matches
    when its message or log matches `match` (if given) and its class is `failure_class` (if given).
    With `a`: `launches_anytime`, the same facts in the reason.
    """
    n = len(outcomes)
    if n == 0:
        return Decision("inconclusive", "no launch of the matching condition(s) was run", details={"launches": 0})
    matched, captured, other = _matched(outcomes, expect, match, failure_class)
    k = sum(matched)
    details = {"launches": n, "matched": k, "expect": expect, "match": match, "failure_class": failure_class,
               "captured": captured, "other_failure": other}
    what = "failed" + (f" as {failure_class}" if failure_class else "") + (f" matching {match!r}" if match else "")
    started = sum(o.ok or o.served_before_failing is not None for o in outcomes)
    if a is not None:
        if expect == "starts":
            facts = _started_facts(outcomes, k, n) + (f"; failed: {_quote(other)}" if k < n else "")
        else:
            facts = (f"{k}/{n} launches {what}" + (f": {_quote(captured)}" if k else f" ({started} started)")
                     + (f"; other failure: {_quote(other)}" if other else ""))
        return launches_anytime(outcomes, matched, rate, a, facts, details)
    if expect == "starts":
        if k == n:
            return Decision("supported", f"all {n} launch(es) started", float(k / n), None, None, details)
        msg = f"failed: {_quote(other)}"
        if k == 0:
            return Decision("refuted", f"{_started_facts(outcomes, k, n)}; {msg}", 0.0, None, None, details)
        return Decision("inconclusive", f"flaky: {_started_facts(outcomes, k, n)}; {msg}", float(k / n), None, None,
                        details)
    if k == n:
        return Decision("supported", f"all {n} launch(es) {what}: {_quote(captured)}", 1.0, None, None, details)
    tail = f"; other failure: {_quote(other)}" if other else ""
    if k == 0:
        return Decision("refuted", f"0/{n} launches {what} ({started} started){tail}", 0.0, None, None, details)
    return Decision("inconclusive", f"flaky: {k}/{n} launches {what}: {_quote(captured)}{tail}",
                    float(k / n), None, None, details)


def launches_anytime(outcomes: Sequence[LaunchOutcome], matched: Sequence[bool], rate: float, a: float,
                     facts: str, details: dict[str, Any]) -> Decision:
    """The claimed rate q > `rate` tested by the beta-binomial e-processes (stats.anytime.RateSequence).

    Looks are the ends of blocks (outcomes in block order): supported iff the e-process against
    q <= rate reached 1/a at some look (anytime p <= a; then the running lower confidence-sequence
    bound is above `rate`), refuted iff the one against q >= rate did, inconclusive otherwise, or if
    both did (the launches then changed over the run, which the i.i.d. model excludes).
    """
    looks: list[tuple[int, int]] = []
    k = 0
    for i, (o, hit) in enumerate(zip(outcomes, matched, strict=False)):
        k += hit
        if i + 1 == len(outcomes) or outcomes[i + 1].block != o.block or o.block is None:
            looks.append((k, i + 1))
    seq = RateSequence(looks)
    lo, hi = seq.bounds(a)
    p_sup, p_ref = seq.p_above(rate), seq.p_below(rate)
    r = _f(rate)
    head = f"{facts}; rate {_f(seq.estimate)}, {_level(a)} confidence sequence [{_f(lo)}, {_f(hi)}]"
    if p_sup <= a and p_ref <= a:
        verdict, why = "inconclusive", (f"crossed the claimed rate {r} in both directions: the launches changed "
                                        f"over the run (they are assumed independent and identically distributed)")
    elif p_sup <= a:
        verdict, why = "supported", f"lower bound above the claimed rate {r} (anytime {_p(p_sup)})"
    elif p_ref <= a:
        verdict, why = "refuted", f"upper bound below the claimed rate {r}: the expected outcome is significantly rarer"
    else:
        need = launches_to_support(rate, a)
        verdict, why = "inconclusive", (f"contains the claimed rate {r} (anytime {_p(p_sup)}; at least {need} "
                                        f"launches, all as expected, are needed to support it)")
    details = {**details, "method": "anytime", "rate": rate, "one_sided_alpha": a, "ci_level": 1 - 2 * a,
               "rate_ci": [lo, hi], "p_lower": p_sup, "p_upper": p_ref, "looks": [list(x) for x in looks],
               "prior": "Beta(1, 1), truncated to each one-sided alternative"}
    return Decision(verdict, f"{head} {why}", seq.estimate, (lo, hi), p_sup, details)
