"""A bisection over versions as a pure replay: from each version's launch values so far, what to launch next,
or where the change point is. The policy (framework.run.bisect) asks this after every launch and the audit
asks it once over the whole trials file: both get the same answer, because every decision reads only the
first n launches of each version at the look where it was taken (n = launches, launches + block, ...).

The order of work: the ends first (good vs bad, `stats.bisection.ends_look`) until they differ beyond the
margin, are the same within the threshold, or reach max_launches; then probes at the midpoint of the versions
still in question (`stats.bisection.probe_look` against both ends), each with as many launches as it takes;
a probe's ends get launches too when the probe has more than they do. Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from framework.analysis.rows import group_rows
from framework.analysis.ruleset import LATEST, RULESETS, RuleSet
from framework.core.bisect import BisectBlock
from framework.core.spec import Factor, Hypothesis
from framework.stats import bisection as bs

FACTOR = "version"


@dataclass(frozen=True)
class Settings:
    """The registered numbers a bisection decides with."""

    versions: int
    alpha: float
    threshold: float
    margin: float
    launches: int
    block: int
    max_launches: int
    max_failures: int
    gap: bool = False  # rules version 5's `bisect_gap`: a probe is judged against the change the ends have shown

    @classmethod
    def of(cls, b: BisectBlock, alpha: float, ruleset: RuleSet | None = None) -> Settings:
        rules = RULESETS[LATEST] if ruleset is None else ruleset
        return cls(len(b.versions), alpha, b.threshold, b.equivalence_margin, b.launches, b.block, b.max_launches,
                   b.max_failures, gap=rules.bisect_gap)

    @property
    def probes(self) -> int:
        return max(1, math.ceil(math.log2(self.versions - 1)))

    @property
    def alphas(self) -> tuple[float, float]:
        return bs.split_alpha(self.alpha, self.probes)

    def looks(self) -> list[int]:
        """The launch counts at which a comparison is looked at."""
        out, n = [], self.launches
        while n < self.max_launches:
            out.append(n)
            n += self.block
        return [*out, self.max_launches]


@dataclass
class Compared:
    """One comparison as decided: the ends, or a probe (version index) against both ends."""

    role: str  # "ends" or "probe"
    version: int
    launches: int  # launches of the version the decision used
    estimate: float  # the contrast's mean (log scale)
    lo: float
    hi: float
    call: str | None
    looks: int


@dataclass
class State:
    """Where the bisection stands: what it needs next (`need`: version -> launches it must have), or its outcome."""

    need: dict[int, int] = field(default_factory=dict)
    outcome: str | None = None  # named, no_change, undecided, failed
    reason: str = ""
    compared: list[Compared] = field(default_factory=list)
    last_good: int | None = None
    first_bad: int | None = None

    @property
    def done(self) -> bool:
        return self.outcome is not None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _logs(v: list[float], n: int) -> list[float]:
    return [math.log(x) for x in v[:n]]


def replay(s: Settings, values: list[list[float]], failures: list[int]) -> State:
    """The bisection's state from each version's launch values (launch order) and failed-launch counts."""
    st = State()
    good, bad = 0, s.versions - 1
    alpha_ends, alpha_probe = s.alphas

    def short(n: int, *versions: int) -> bool:
        missing = {v: n for v in versions if len(values[v]) < n}
        if not missing:
            return False
        gone = [v for v in missing if failures[v] >= s.max_failures]
        if gone:
            st.outcome, st.reason = "failed", f"version {gone[0]} failed {failures[gone[0]]} launches"
        else:
            st.need = missing
        return True

    def sequential(what: str, version: int, needs: tuple[int, ...], look_at: Callable[[int], bs.Look]
                   ) -> bs.Look | None:
        """Look at n = s.looks() launches until a call; None when a version still waits for launches (its
        standing so far recorded) or failed; the last look, decided or not, recorded as a comparison."""
        look: bs.Look | None = None
        looks = 0
        for n in s.looks():
            if short(n, *needs):
                if look is not None:  # where it stands while it waits for launches
                    st.compared.append(Compared(what, version, look.n, look.estimate, look.lo, look.hi, None, looks))
                return None
            looks += 1
            look = look_at(n)
            if look.call:
                break
        assert look is not None
        st.compared.append(Compared(what, version, look.n, look.estimate, look.lo, look.hi, look.call, looks))
        return look

    ends = sequential("ends", bad, (good, bad), lambda n: bs.ends_look(
        [y - x for x, y in zip(_logs(values[good], n), _logs(values[bad], n), strict=True)],
        alpha_ends, s.threshold, s.margin))
    if ends is None:
        return st
    if ends.call is None:
        st.outcome, st.reason = "undecided", f"the ends are undecided at max_launches {s.max_launches}"
        return st
    if ends.call == "same":
        st.outcome = "no_change"
        st.reason = (f"the ends do not differ by the threshold {s.threshold:g}: the interval of their ratio lies "
                     f"within +/-{s.threshold:g}; stopped after the first comparison")
        return st
    sign = 1.0 if ends.estimate > 0 else -1.0
    decided_at = ends.n

    def gap(n: int) -> float:
        """The probe's gap at its look n (`bisect_gap`): from the ends' looks up to max(n, the ends' decision),
        launches the ends had when that probe look was taken, so the live policy and the audit agree."""
        if not s.gap:
            return 0.0
        upto = max(n, decided_at)
        contrasts = [y - x for x, y in zip(_logs(values[good], upto), _logs(values[bad], upto), strict=True)]
        return bs.ends_gap(contrasts, alpha_ends, sign, [k for k in s.looks() if k <= upto])

    lo, hi = good, bad
    while hi - lo > 1:
        mid = (lo + hi) // 2
        look = sequential("probe", mid, (mid, good, bad), lambda n, mid=mid: bs.probe_look(
            [x - (y + z) / 2 for x, y, z in zip(_logs(values[mid], n), _logs(values[good], n),
                                                 _logs(values[bad], n), strict=True)], alpha_probe, sign, gap(n)))
        if look is None:
            return st
        if look.call is None:
            st.outcome, st.reason = "undecided", f"version {mid} is undecided at max_launches {s.max_launches}"
            return st
        if look.call == "between":
            st.outcome = "undecided"
            st.reason = (f"version {mid} is like neither end: its interval excludes both (a second change point or a "
                         f"gradual drift, which a bisection cannot locate; docs/statistics.md, section 13)")
            return st
        lo, hi = (mid, hi) if look.call == "good" else (lo, mid)
    st.outcome, st.last_good, st.first_bad = "named", lo, hi
    return st


# --------------------------------------------------------------------------- rows


def version_hypothesis(h: Hypothesis, worktrees: dict[str, str] | None = None) -> Hypothesis:
    """The versions as one factor `version` (a level per version, the good end its reference), so the run path
    launches a version exactly as it launches a condition. A commit's level runs the server from its worktree
    (`worktrees`: name -> path): PYTHONPATH names it and PYTHONSAFEPATH keeps the caller's directory off
    sys.path, so `python -m framework.servers...` imports that commit's code."""
    b = h.bisect
    if b is None:
        raise ValueError(f"hypothesis {h.name} has no bisect block")
    levels: dict[str, Any] = {}
    for v in b.versions:
        env = dict(v.env)
        if v.commit is not None and worktrees and v.name in worktrees:
            env = {**env, "PYTHONPATH": worktrees[v.name], "PYTHONSAFEPATH": "1"}
        levels[v.name] = {"server_args": list(v.server_args), "env": env, "python": v.python,
                          "sim_profile": v.sim_profile}
    factor = Factor.model_validate({"reference": b.versions[0].name, "levels": levels})
    return h.model_copy(update={"factors": {FACTOR: factor}, "predictions": []})


@dataclass
class VersionData:
    """One version's launches: ids and values of those that measured the metric, and how many failed."""

    ids: list[str] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    failed: int = 0
    seconds: float = 0.0


def version_data(h: Hypothesis, rows: list[dict[str, Any]], ruleset: RuleSet | None = None) -> list[VersionData]:
    """Each version's launches from a bisection's trials rows, in version order."""
    grid = version_hypothesis(h)
    grouped = group_rows(grid, rows, ruleset)
    out = [VersionData() for _ in grouped.conditions]
    for index, d in grouped.data.items():
        ids, means = d.means()
        vd = out[index]
        vd.ids, vd.values = list(ids), [float(m) for m in means]
        vd.failed = sum(1 for r in d.launch_rows if not r.get("ok"))
    return out


def state_of(h: Hypothesis, rows: list[dict[str, Any]], ruleset: RuleSet | None = None) -> State:
    """The bisection's state from its trials rows (what the policy asks after each launch, and the audit once)."""
    assert h.bisect is not None
    data = version_data(h, rows, ruleset)
    return replay(Settings.of(h.bisect, h.design.alpha, ruleset), [d.values for d in data], [d.failed for d in data])


def summary(h: Hypothesis, st: State, data: list[VersionData]) -> dict[str, Any]:
    """The figures a bisect record holds: every version's launches and geometric mean, the comparisons, and
    the step from the last good to the first bad version with its interval."""
    assert h.bisect is not None
    b, alpha = h.bisect, h.design.alpha
    names = [v.name for v in b.versions]
    per = []
    for i, d in enumerate(data):
        gm = math.exp(sum(math.log(x) for x in d.values) / len(d.values)) if d.values else None
        per.append({"index": i, "version": names[i], "commit": b.versions[i].commit, "launches": len(d.values),
                    "failed": d.failed, "mean": gm, "values": d.values})
    out: dict[str, Any] = {
        "outcome": st.outcome, "reason": st.reason, "metric": h.metric, "threshold": b.threshold,
        "margin": b.equivalence_margin, "alpha": alpha, "alpha_ends": Settings.of(b, alpha).alphas[0],
        "alpha_probe": Settings.of(b, alpha).alphas[1], "probe_budget": Settings.of(b, alpha).probes,
        "versions": per, "compared": [asdict(c) for c in st.compared],
        "probed": [names[c.version] for c in st.compared if c.role == "probe"],
        "launches_spent": sum(len(d.values) + d.failed for d in data),
    }
    measured = [p for p in per if p["launches"]]
    mean_launches = sum(p["launches"] for p in measured) / len(measured) if measured else 0.0
    out["linear_scan_launches"] = round(mean_launches * len(names))  # every version at this run's mean launches
    if st.outcome == "named" and st.first_bad is not None and st.last_good is not None:
        ratio, lo, hi = bs.step_estimate(data[st.last_good].values, data[st.first_bad].values, alpha)
        ends = st.compared[0]
        share = math.log(ratio) / ends.estimate if ends.estimate else math.nan
        out.update(first_bad=names[st.first_bad], last_good=names[st.last_good],
                   first_bad_commit=b.versions[st.first_bad].commit,
                   step={"ratio": ratio, "ci": [lo, hi], "level": 1 - alpha, "share_of_total": share,
                         "exceeds_threshold": abs(math.log(ratio)) >= math.log1p(b.threshold),
                         "one_step": bool(share >= 0.5)})
    return out
