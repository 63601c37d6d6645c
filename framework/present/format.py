"""One formatter for every display (console, summary.md, report, sweep summary, audit history).

A number that is missing, not a number or NaN shows as ``-``; infinity as ``inf`` / ``-inf`` (an
interval can be unbounded, and that is worth seeing); p-values with three significant digits
(``0.0502``), below 0.001 with two (``4.2e-05``). One definition, so the same record reads the same
wherever it is shown.
"""

from __future__ import annotations

import html
import math
import re
from typing import Any

from framework.core.vocabulary import DECODE_UNMEASURED, REQUEST_ERRORS

MISSING = "-"


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and not (isinstance(x, float) and math.isnan(x))


def _number(x: Any, spec: str) -> str:
    if not _is_number(x):
        return MISSING
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return format(x, spec)


def num(x: Any, digits: int = 3) -> str:
    """A fixed-point number: ``1.005``; ``inf``; ``-`` for anything that is not a number."""
    return _number(x, f".{digits}f")


def sig(x: Any, digits: int = 4) -> str:
    """A number to `digits` significant digits (``92.65``), for means in their own unit."""
    return _number(x, f".{digits}g")


def percent(x: Any, digits: int = 2, missing: str = MISSING) -> str:
    """A fraction as a percentage: ``3.25%``; `missing` (``-``) for anything that is not a number."""
    return _number(x, f".{digits}%") if _is_number(x) else missing


def p_value(x: Any) -> str:
    """``0.0502``, ``4.2e-05``, ``1.00``; ``-`` when there is none."""
    if not _is_number(x) or math.isinf(x):
        return MISSING
    return f"{x:.2g}" if x < 0.001 else f"{x:#.3g}"


def ci(interval: Any, digits: int = 3) -> str:
    """``[0.989, 1.022]``; ``-`` when there is no interval."""
    if isinstance(interval, (list, tuple)) and len(interval) == 2:
        return f"[{num(interval[0], digits)}, {num(interval[1], digits)}]"
    return MISSING


def levels(values: dict[str, str]) -> str:
    """A condition's factor levels: ``fusion=on, decoding=eagle3``."""
    return ", ".join(f"{k}={v}" for k, v in values.items())


# What lets embedded text add structure: code, emphasis, table cells (|), strikethrough, a link or an image (a `]`
# before `(`, `[` or `:`; an interval's "[1.2, 1.5]" stays as it reads); an underscore only where it can open or
# close emphasis (not inside a word: snake_case names stay as they are).
_MD_SPECIAL = re.compile(r"[\\`*|~]|\](?=[(\[:])|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")


def _md_inline(text: object) -> str:
    """HTML's &, < and > as entities, Markdown's punctuation backslash-escaped, line breaks as spaces."""
    out = html.escape(str(text), quote=False)
    out = _MD_SPECIAL.sub(lambda m: "\\" + m.group(0), out)
    return " ".join(out.splitlines())


def md_text(text: object) -> str:
    """Text embedded in Markdown as itself: HTML's &, < and > as entities, Markdown's punctuation backslash-escaped,
    a leading # (a heading) escaped and line breaks as spaces, so a hypothesis name, a description, a flag or an
    error message cannot add a link, an image, a tag or a block of its own (CommonMark 0.31, section 2.4)."""
    out = _md_inline(text)
    if re.match(r"\s*(#|[-+](\s|$))", out):  # a heading or a list item of its own
        return "\\" + out.lstrip()
    return re.sub(r"^(\s*\d+)([.)])(?=\s|$)", r"\1\\\2", out)  # an ordered list item: 1\. x


def md_cell(text: str) -> str:
    """Text safe inside a Markdown table cell, with line breaks as <br> (the one tag it writes). A cell holds
    inline content only (GFM tables), so a leading -, # or 1. starts no block there and stays as it reads."""
    return "<br>".join(_md_inline(line) for line in str(text).splitlines()) if text else ""


def md_code(text: object) -> str:
    """Text as an inline code span: fenced by one backtick more than its longest run (CommonMark 6.1)."""
    body = " ".join(str(text).splitlines())
    longest = max((len(m) for m in re.findall(r"`+", body)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if body.startswith("`") or body.endswith("`") else ""
    return f"{fence}{pad}{body}{pad}{fence}"


def prediction_line(p: dict[str, Any]) -> str:
    """`id: verdict (est [lo, hi], p, p_adj -> adjusted verdict)` for one prediction of a sweep row."""
    s = f"{p['id']}: {p['verdict']} ({num(p['estimate'])} {ci(p['ci'])}, p={p_value(p['p_value'])}"
    if p.get("p_adjusted") is not None:
        s += f", p_adj={p_value(p['p_adjusted'])}"
    s += ")"
    if p.get("adjusted_verdict") != p.get("verdict"):
        s += f" -> {p['adjusted_verdict']} (adjusted)"
    return s


def requests_lost(loss: dict[str, Any] | None) -> str | None:
    """A condition's lost requests in words, or None when nothing was lost or the record does not say.

    `loss` is a record condition's `losses` (framework.analysis.launches.losses; rules version 1 counts
    no unmeasured requests): '9 of 32 measured requests (28%): 9 not measured (one_chunk: every token ...)'.
    """
    if not loss or not loss.get("requests_lost"):
        return None
    parts = [f"{n} not measured ({why}: {DECODE_UNMEASURED.get(why, why)})"
             for why, n in (loss.get("unmeasured_why") or {}).items()]
    if loss.get("censored"):
        why = "; ".join(f"{n} {c}: {REQUEST_ERRORS.get(c, c)}" for c, n in (loss.get("censored_why") or {}).items())
        parts.append(f"{loss['censored']} failed (censored{': ' + why if why else ''})")
    share = loss.get("requests_lost_share") or 0.0
    return f"{loss['requests_lost']} of {loss['requests']} measured requests ({share:.0%}): " + ", ".join(parts)


def failed_launches(c: dict[str, Any]) -> str:
    """A record condition's failed launches, with those that started and failed while measured said apart:
    '3 (3 after serving requests)': a launch that served and then crashed did start."""
    failed = int((c.get("launches") or {}).get("failed") or 0)
    later = int((c.get("losses") or {}).get("failed_while_measured") or 0)
    return f"{failed} ({later} after serving requests)" if later else str(failed)


def new_machine(p: dict[str, Any]) -> dict[str, Any] | None:
    """A prediction's interval for the next machine: the record's `details.new_machine`, or, for a record over
    machines written before it (rules version 3), computed from the record's own per-machine contrasts at the
    record's level (framework.analysis.machines.new_machine); None when the verdict is not over machines."""
    from framework.analysis.machines import new_machine as compute

    det = p.get("details") or {}
    if isinstance(det.get("new_machine"), dict):
        return det["new_machine"]
    effects = (det.get("machine") or {}).get("machine_effects") if isinstance(det.get("machine"), dict) else None
    a = det.get("one_sided_alpha")
    if not effects or not isinstance(a, (int, float)):
        return None
    return {**compute(effects, float(a)), "rendered": "computed from the record's per-machine contrasts"}


def next_machine(p: dict[str, Any]) -> str | None:
    """The next machine's interval in words: '90% prediction interval for one new machine [8.700, 9.345] (2
    machines, 1 df): not useful: ...'; None when the verdict is not over machines."""
    nm = new_machine(p)
    if nm is None:
        return None
    head = f"{nm['level']:.0%} prediction interval for one new machine"
    where = f"{nm['machines']} machines, {nm['df']} df"
    if nm.get("interval"):
        return f"{head} {ci(nm['interval'])} ({where}): {nm['note']}"
    return f"{head}: none ({where}): {nm['note']}"


def capacity_line(cap: dict[str, Any]) -> str:
    """One SLO-capacity entry of search.json in words, with its caveat when it has one (stats.capacity.thin_margin):
    'SLO capacity along request_rate (ttft_p99_s <= 0.5): estimate 4, lower bound 4 (95%); caveat: thin margin: ...'."""
    def load(x: Any) -> str:
        return "none" if x is None else sig(x)

    text = (f"SLO capacity along {cap.get('dimension')} ({cap.get('constraint')}): "
            f"estimate {load(cap.get('estimate'))}, lower bound {load(cap.get('lower_bound'))} "
            f"({percent(cap.get('coverage'), 0)})")
    notes = [c["text"] for c in cap.get("caveats") or [] if c.get("text")]
    return text + "".join(f"; caveat: {n}" for n in notes)


def covers(p: dict[str, Any]) -> str:
    """The population a prediction's verdict covers: ``this machine``, ``2 machines``; ``-`` for a record from
    before rules version 3, which did not say (its launches may have run on one machine or several)."""
    return str((p.get("details") or {}).get("population") or MISSING)


def population(record: dict[str, Any]) -> str:
    """The record's population in words: ``2 machines (4 + 4 launches; the design asked for 2)``; ``-`` when the
    record does not say (rules versions 1 and 2)."""
    pop = record.get("population") or ((record.get("analysis") or {}).get("details") or {}).get("population")
    if not pop:
        return MISSING
    counts = " + ".join(str(n) for n in (pop.get("launches_by_machine") or {}).values())
    text = f"{pop.get('scope')} ({counts} launches"
    if pop.get("design_machines", 1) > 1:
        text += f"; the design spreads them over {pop['design_machines']}"
    if pop.get("labels_note"):  # rules version 4: labels that name one machine (framework.analysis.machines.names)
        text += f"; {pop['labels_note']}"
    return text + ")"
