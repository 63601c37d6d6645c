"""Print the launch-level noise table (ICC, design effect, m*) of every GPU verdict in a ledger, as markdown.

    python benchmarks/gpu/noise_table.py docs/results/gpu/verdicts.jsonl

The figures are the ones each run printed (framework.stats.variance, on the log scale): between- and
within-launch sd, ICC, design effect at the run's requests per launch, and the cost-optimal requests per
launch m* from the run's own launch and request costs.
"""

from __future__ import annotations

import json
import sys

from framework.stats.variance import optimal_requests


def rows(ledger: str) -> list[str]:
    out = ["| hypothesis | condition | launches | sd between | sd within | ICC | design effect | m* |",
           "|---|---|---|---|---|---|---|---|"]
    for line in open(ledger, encoding="utf-8"):
        rec = json.loads(line)
        if rec.get("kind") != "verdict":
            continue
        var = (rec.get("analysis", {}).get("details") or {}).get("variance") or {}
        c_launch, c_request = var.get("launch_cost_s"), var.get("request_cost_s")
        for index, cond in enumerate(rec["conditions"]):
            comp = (var.get("by_condition") or {}).get(str(index))
            if not comp or comp.get("var_between") is None:
                continue
            m = optimal_requests(comp["var_between"], comp["var_within"], c_launch, c_request)
            m_text = "inf" if m == float("inf") else str(max(1, int(-(-m // 1))))
            levels = ", ".join(f"{k}={v}" for k, v in cond["levels"].items())
            out.append(f"| {rec['hypothesis']['name']} ({rec['backend']}) | {levels} | {cond['launches']['ok']} | "
                       f"{comp['sd_between']:.2%} | {comp['sd_within']:.2%} | {comp['icc']:.2f} | "
                       f"{comp['design_effect']:.2f} | {m_text} |")
    return out


if __name__ == "__main__":
    print("\n".join(rows(sys.argv[1] if len(sys.argv) > 1 else "docs/results/gpu/verdicts.jsonl")))
