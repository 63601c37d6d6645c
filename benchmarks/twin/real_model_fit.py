"""The twin learns speculation from the real-model run (issue 34, item 5).

    python benchmarks/twin/real_model_fit.py [--run docs/results/real_model/runs/gpu_smollm2_ngram]
                                             [--out docs/results/real_model/twin_fit.json]

The run: SmolLM2-135M on one H200, the GPU server with n-gram speculation (NGRAM, 4 draft tokens) on and off,
on a copy and a free-text workload, 1 stream, 3 launches per condition (benchmarks/gpu/real_model.sh).

Held-out, chosen before any fit (and written here before this script was first run): the launches of
`spec=ngram, text=free`. The twin is fitted on the `text=copy` launches (speculation off and on: d0, the verify
step's width term, p0 + p1 P at one prompt length, the copy workload's accept length), then predicts the TPOT and
TTFT of the held-out launches. The accept length there is a workload property that the copy fit cannot know: the
prediction takes it from the held-out launches' server counters (spec_accept_token_num / spec_verify_ct per
request), not from their timing, so the comparison tests the twin's step costs and its speculative step model
carried to another workload. Separately, each workload's own fit (speculation off and on) reports its accept
length with a 90% interval, and the whole run's fit (both workloads, one pooled accept length) is shown for what a
single accept length does.

Writes the JSON (fits, held-out comparison) and prints a Markdown summary.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from framework.analysis import twinfit  # noqa: E402
from framework.servers.sim.adapter import twin_predict  # noqa: E402

Z90 = 1.6448536269514722
SPEC = ("decode_step_us", "decode_us_per_token", "spec_overhead_us", "accept_length", "prefill_base_us",
        "prefill_us_per_token")


def _rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "trials.jsonl").read_text().splitlines() if line.strip()]


def _where(rows: list[dict], **levels: str) -> list[dict]:
    """The rows of launches whose levels match (and the rows without a launch: the environment)."""
    keep = {r["launch_id"] for r in rows if r.get("kind") == "workload"
            and all((r.get("levels") or {}).get(k) == v for k, v in levels.items())}
    return [r for r in rows if r.get("launch_id") is None or r.get("launch_id") in keep]


def _params(fit) -> dict:
    out = {}
    for n in SPEC:
        p = fit.parameters[n]
        if p.identifiable and p.estimate is not None:
            ci = [p.estimate - Z90 * p.se, p.estimate + Z90 * p.se] if p.se is not None else None
            out[n] = {"estimate": p.estimate, "se": p.se, "ci90": ci, "unit": p.unit}
        else:
            out[n] = {"estimate": None, "identifiable": False, "reason": p.reason, "needs": p.needs}
    return out


def _accept(rows: list[dict]) -> dict:
    """The accept length's 90% interval over the distinct prompts: greedy outputs repeat exactly, so every
    launch of a prompt accepts the same drafts (the launches' means agree to the last digit and the fit's
    standard error from them is 0); the sample is the prompts, t interval on their mean accept lengths."""
    from scipy import stats

    by: dict[str, list[float]] = {}
    for r in rows:
        if r.get("kind") == "request" and r.get("ok") and r.get("phase") == "measured" \
                and isinstance(r.get("accept_length"), (int, float)):
            by.setdefault((r.get("output") or {}).get("prompt_sha256") or r["trial_id"], []).append(r["accept_length"])
    means = [statistics.mean(v) for v in by.values()]
    n = len(means)
    mu, sd = statistics.mean(means), statistics.stdev(means) if n > 1 else float("nan")
    half = float(stats.t.ppf(0.95, n - 1)) * sd / math.sqrt(n) if n > 1 else float("nan")
    return {"estimate": mu, "se": sd / math.sqrt(n), "ci90": [mu - half, mu + half], "unit": "tokens",
            "interval_from": f"{n} distinct prompts (t, {n - 1} df)", "requests": sum(map(len, by.values()))}


def _fit(rows: list[dict], name: str):
    launches = twinfit.launches_from_rows(rows, "gpu")
    return twinfit.fit(launches, twin_predict, engine="gpu", name=name), launches


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", default=str(ROOT / "docs/results/real_model/runs/gpu_smollm2_ngram"))
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    rows = _rows(Path(a.run))
    result: dict = {"run": "docs/results/real_model/runs/gpu_smollm2_ngram",
                    "held_out": "spec=ngram, text=free (chosen before any fit)",
                    "fitted_on": "text=copy (spec off and on)", "fits": {}}
    for label, sel in (("copy", {"text": "copy"}), ("free", {"text": "free"}), ("whole run", {})):
        f, ls = _fit(_where(rows, **sel), f"real_{label.replace(' ', '_')}")
        params = _params(f)
        if sel:  # the accept length's interval from the distinct prompts (see _accept)
            params["accept_length"] = {**params["accept_length"], **_accept(_where(rows, spec="ngram", **sel))}
        result["fits"][label] = {"launches": len(ls), "parameters": params, "notes": f.notes,
                                 "residual_log_sd": {m: nz.residual_log_sd for m, nz in f.noise.items()}}
        if label == "copy":
            copy_fit = f
    held = twinfit.launches_from_rows(_where(rows, spec="ngram", text="free"), "gpu")
    acc = statistics.mean(v for x in held for v in x.accept)
    config = held[0].config
    pred = twinfit.predict_interval(copy_fit.with_values({"accept_length": acc}), config, twin_predict,
                                    metrics=("tpot_s", "ttft_s"))
    comp = []
    for m in ("tpot_s", "ttft_s"):
        measured = [x.mean(m) for x in held]
        gm = math.exp(statistics.mean(math.log(v) for v in measured))
        p = pred[m]
        comp.append({"metric": m, "measured_launch_means": measured, "measured_geomean": gm,
                     "predicted": p["mean"], "low90": p["low"], "high90": p["high"],
                     "error": p["mean"] / gm - 1, "covered": [p["low"] <= v <= p["high"] for v in measured]
                     if p["low"] is not None else None, "not_identified": p["not_identified"],
                     "extrapolation": p["extrapolation"]})
    result["held_out_prediction"] = {"accept_length_from_counters": acc, "config": config.model_dump(),
                                     "comparison": comp}
    text = json.dumps(result, indent=1, default=float)
    if a.out:
        Path(a.out).write_text(text + "\n")
    print(_markdown(result))
    return 0


def _fmt(p: dict) -> str:
    if p.get("estimate") is None:
        return f"not identified: {p['reason']}"
    ci = p.get("ci90")
    return f"{p['estimate']:.4g} {p['unit']} (90% CI {ci[0]:.4g} to {ci[1]:.4g})" if ci else f"{p['estimate']:.4g}"


def _markdown(r: dict) -> str:
    lines = ["| parameter | " + " | ".join(f"fit on {k} ({v['launches']} launches)" for k, v in r["fits"].items())
             + " |", "|---|" + "---|" * len(r["fits"])]
    for n in SPEC:
        lines.append(f"| {n} | " + " | ".join(_fmt(v["parameters"][n]) for v in r["fits"].values()) + " |")
    h = r["held_out_prediction"]
    lines += ["", f"Held-out {r['held_out']}, twin fitted on {r['fitted_on']}; accept length at the held-out "
              f"condition from the server's counters: {h['accept_length_from_counters']:.3f}.", "",
              "| metric | measured launch means | predicted | 90% interval | error | covered |",
              "|---|---|---|---|---|---|"]
    for c in h["comparison"]:
        iv = f"{c['low90']:.4g} to {c['high90']:.4g}" if c["low90"] is not None else \
            f"none (needs {', '.join(c['not_identified'])})"
        lines.append(f"| {c['metric']} | {', '.join(f'{v:.4g}' for v in c['measured_launch_means'])} | "
                     f"{c['predicted']:.4g} | {iv} | {c['error']:+.1%} | {c['covered']} |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
