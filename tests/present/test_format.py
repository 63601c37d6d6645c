"""One formatter: the same figure reads the same in summary.md, the report and the sweep summary."""

from __future__ import annotations

import math

from framework.present import format as fmt


def test_numbers_p_values_and_intervals() -> None:
    assert fmt.num(1.23456) == "1.235" and fmt.num(None) == "-" and fmt.num(math.nan) == "-"
    assert fmt.num(math.inf) == "inf" and fmt.num(-math.inf) == "-inf" and fmt.num(True) == "-"
    assert fmt.p_value(0.0502) == "0.0502" and fmt.p_value(0.05) == "0.0500" and fmt.p_value(4.2e-5) == "4.2e-05"
    assert fmt.p_value(None) == "-" and fmt.ci([0.98, math.inf]) == "[0.980, inf]" and fmt.ci(None) == "-"


def test_a_p_value_prints_the_same_in_the_report_and_the_sweep_summary() -> None:
    from framework.present.report import record_blocks
    from framework.present.sweep import to_markdown

    p = {"id": "x", "kind": "increase", "verdict": "supported", "estimate": 1.5, "ci": [1.2, math.inf],
         "p_value": 0.0502, "reason": "r"}
    record = {"hypothesis": {"name": "h"}, "verdict": "supported", "backend": "sim", "predictions": [p],
              "conditions": [], "analysis": {}, "environment": {}, "config": {}}
    cells = [c for b in record_blocks(record, None, "") if hasattr(b, "rows") for row in b.rows for c in row]
    assert "0.0502" in cells and "[1.200, inf]" in cells
    summary = {"multiplicity": {"description": "Holm", "alpha": 0.05, "family_size": 1, "job_family_size": 1},
               "counts": {"jobs": 1, "ok": 1, "failed": 0},
               "jobs": [{"job": 0, "status": "ok", "hypothesis": "h", "backend": "sim", "verdict": "supported",
                         "p_value": 0.0502, "p_adjusted": 0.0502, "adjusted_verdict": "supported", "overrides": [],
                         "predictions": [{**p, "p_adjusted": 0.0502, "adjusted_verdict": "supported"}]}]}
    md = to_markdown(summary)
    assert "| 0.0502 |" in md and "[1.200, inf]" in md


def test_failed_launches_say_which_failed_after_serving() -> None:
    from framework.present import format as fmt

    assert fmt.failed_launches({"launches": {"failed": 3}, "losses": {"failed_while_measured": 3}}) == \
        "3 (3 after serving requests)"
    assert fmt.failed_launches({"launches": {"failed": 2}}) == "2"


def test_the_next_machine_is_shown_for_a_record_over_machines_even_one_written_before_it() -> None:
    from framework.present import format as fmt

    v3 = {"id": "p", "details": {"one_sided_alpha": 0.05,
                                 "machine": {"machine_effects": {"a": 2.1959, "b": 2.2026}}}}
    text = fmt.next_machine(v3)
    assert text is not None and text.startswith("90% prediction interval for one new machine [")
    assert "(2 machines, 1 df)" in text and "a useful one needs 8 machines" in text
    assert fmt.next_machine({"id": "q", "details": {"population": "this machine"}}) is None


def test_a_capacity_line_carries_its_caveat_only_when_it_has_one() -> None:
    from framework.present import format as fmt

    cap = {"dimension": "request_rate", "constraint": "ttft_p99_s <= 0.5", "estimate": 4.0, "lower_bound": 4.0,
           "coverage": 0.95, "caveats": []}
    assert fmt.capacity_line(cap) == ("SLO capacity along request_rate (ttft_p99_s <= 0.5): estimate 4, "
                                      "lower bound 4 (95%)")
    thin = {**cap, "caveats": [{"kind": "thin_margin", "text": "thin margin: load 4, ..."}]}
    assert fmt.capacity_line(thin).endswith("(95%); caveat: thin margin: load 4, ...")
