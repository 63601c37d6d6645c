"""Calibration through the real sim: the power `plan` prints against the verdicts of real runs, once per kind.

benchmarks/calibration.py checks the decision rules on rows drawn from the sim's noise model, with no
server. This one goes through what a user runs. For each prediction kind (ratio `increase`, ratio
`decrease`, `equivalent`, `interaction`, `launches`) it writes a small hypothesis on the seed's rig
(profile rtx_pro_6000_tp8, 2 requests + 1 warm-up per launch), asks `python -m framework plan
hypothesis=... power=0.7` for a design (plan probes this machine's measurement noise first, as it
does for a user), reads the launches per condition and the power it prints for them, then runs that
fixed design R times through `python -m framework run` (real sim processes over HTTP, recorded seeds
1..R, one run after another unless `--jobs 2`) and counts each run's verdict for the prediction in
the ledger. It prints, per kind: the planned power, the observed rate with its binomial MC-SE and
Clopper-Pearson 95% interval, whether |observed - planned| <= 2 x the combined MC-SE (the run's
binomial SE at the planned power and plan's own Monte Carlo SE, `planning.DRAWS` draws), and the
wall time.

The thresholds (min_effect, margin) were chosen once, from `planning.power_of` on the sim's model
of the rig, so that plan lands at 3-4 launches per condition with power 0.6-0.9 (an informative
range), before any of these runs was made; nothing is tuned to the verdicts. `launches`: a clean
level (expect starts) and a level whose server crashes at start-up (sim fault flag
`--sim-fault-crash-at-start`, expect fails): plan does not model launch outcomes (it plans one
launch and says they are counts), so the observed counts are reported against the rule's
definition (a deterministic fault: every run should support both).

`--analysis anytime` checks plan's anytime model (`planning.plan_anytime`) the same way: `plan ...
design.analysis=anytime power=0.7` prints a cap (whole blocks of `design.sequential.block`, 2), the
power at that cap and the expected launches per condition at the stop, each with its MC SE; the
design then runs R times as a user would run it, `design.analysis=anytime design.sequential=true
design.max_launches=CAP` (a look after every block, stop when no prediction is inconclusive). Per
kind it compares the observed rate of the right verdict with plan's power, and the mean launches
per condition at the stop (from each record's last look) with plan's expected launches, each within
2 x the combined MC-SE: sqrt(p(1-p)/R + plan's SE^2) for the rate, sqrt(sd^2/R + plan's SE^2) for the
launches, sd the sample SD of the runs' launches. Same hypotheses and thresholds as the fixed check
(chosen before any run). By default the kinds increase, decrease, equivalent and launches: for `launches` plan
assumes every launch has the expected outcome, so it predicts exactly launches_to_support(0.5,
0.05) = 7 launches, rounded up to whole blocks (8), and P = 1 (a deterministic fault).

    nice python benchmarks/calibration_sim.py --runs 40 --jobs 2   # the figures in docs/statistics.md s9 (25 min)
    nice python benchmarks/calibration_sim.py --quick              # 3 runs per kind, a smoke run
    nice python benchmarks/calibration_sim.py --analysis anytime --runs 30 --jobs 2   # the anytime figures in s9

The sims start at once (`--sim-startup-s 0`, for plan's probe too): start-up time is wall time only,
not part of the measured noise.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from scipy import stats

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from framework.analysis import planning  # noqa: E402

POWER = 0.7  # what plan is asked for; it prints the power of the launches it chooses
FAST = 'backend.extra_args=[--sim-startup-s,"0"]'
EAGLE3 = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "lmsys/SGLang-EAGLE3-DeepSeek-V3",
          "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]
FUSION = ["--enable-flashinfer-allreduce-fusion"]
FUSION_FACTOR = {"reference": "off", "levels": {"off": {}, "on": {"server_args": FUSION}}}
DECODING_FACTOR = {"reference": "baseline", "levels": {"baseline": {}, "eagle3": {"server_args": EAGLE3}}}


@dataclass(frozen=True)
class Kind:
    name: str  # the prediction kind, and the hypothesis's name
    factors: dict[str, Any]
    predictions: list[dict[str, Any]]

    def hypothesis(self) -> dict[str, Any]:
        return {"name": f"calib_{self.name}", "statement": f"calibration of the {self.name} rule on the real sim",
                "experiment": "rtx_pro_6000_tp8", "metric": "decode_tok_s", "factors": self.factors,
                "predictions": self.predictions, "design": {"launches": 3, "requests": 2, "warmup": 1, "seed": 1}}


# The sim's model of the rig (decode_tok_s): baseline 92.60 (fusion off) / 92.70 (on); EAGLE-3 54.03 / 96.22;
# EAGLE-3 adds a 6.3% per-request sd (accept length), baseline 0.4%; launches 0.6% plus 3% slow ones (8%).
KINDS = [
    # EAGLE-3 with fusion on / off: true ratio 1.781
    Kind("increase", {"fusion": {"reference": "off", "levels": {"off": {"server_args": EAGLE3},
                                                                "on": {"server_args": EAGLE3 + FUSION}}}},
         [{"id": "faster", "kind": "increase", "factor": "fusion", "level": "on", "min_effect": 0.58}]),
    # EAGLE-3 against baseline decode, fusion off: true ratio 0.583
    Kind("decrease", {"decoding": DECODING_FACTOR},
         [{"id": "slower", "kind": "decrease", "factor": "decoding", "level": "eagle3", "min_effect": 0.37}]),
    # baseline decode with fusion on / off: true ratio 1.001
    Kind("equivalent", {"fusion": FUSION_FACTOR},
         [{"id": "same", "kind": "equivalent", "factor": "fusion", "level": "on", "margin": 0.02}]),
    # fusion helps EAGLE-3 more than baseline decode: true ratio of ratios 1.779
    Kind("interaction", {"fusion": FUSION_FACTOR, "decoding": DECODING_FACTOR},
         [{"id": "more", "kind": "interaction", "factor": "fusion", "level": "on", "by": "decoding",
           "by_level": "eagle3", "direction": "larger", "min_effect": 0.62}]),
    Kind("launches", {"fault": {"reference": "none", "levels": {
        "none": {}, "crash": {"server_args": ["--sim-fault-crash-at-start", "3"]}}}},
         [{"id": "clean_starts", "kind": "launches", "where": {"fault": "none"}, "expect": "starts"},
          {"id": "crash_fails", "kind": "launches", "where": {"fault": "crash"}, "expect": "fails",
           "match": "fault injected: crash at start"}]),
]


@dataclass(frozen=True)
class Planned:
    launches: int
    power: float | None  # None: plan gives no power (launch outcomes)
    target: str  # the verdict the assumed truth implies
    probe: str  # what plan's probe measured, as it printed it


@dataclass(frozen=True)
class AnytimePlanned:
    """What plan printed under design.analysis=anytime: the cap, the hypothesis's power there, the stop."""

    cap: int  # launches per condition (design.max_launches)
    power: float  # P(the hypothesis verdict the assumed truth implies) at the cap
    power_se: float  # plan's MC SE of it
    target: str
    launches: float  # expected launches per condition at the stop
    launches_se: float
    probe: str

ANYTIME_KINDS = ["increase", "decrease", "equivalent", "launches"]


def framework(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "framework", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=1800)


def common_args(kind: Kind, tmp: Path) -> list[str]:
    return [f"hypothesis=calib_{kind.name}", f"paths.hypotheses={tmp / 'hyp'}",
            f"paths.experiments={ROOT / 'experiments'}", FAST]


def plan_kind(kind: Kind, tmp: Path, power: float, analysis: str = "fixed") -> Planned | AnytimePlanned:
    """What `python -m framework plan` prints for this kind: launches per condition and their power."""
    extra = ["design.analysis=anytime"] if analysis == "anytime" else []
    out = framework(["plan", *common_args(kind, tmp), f"power={power}", *extra], tmp)
    if out.returncode != 0:
        raise SystemExit(f"plan failed for {kind.name}: {out.stderr[-2000:]}")
    return parse_anytime_plan(kind, out.stdout) if analysis == "anytime" else parse_plan(kind, out.stdout)


def _probe(text: str) -> str:
    probe = re.search(r"probed now .*?: (between launches .*?) \(probe=false", text)
    return probe.group(1) if probe else "-"


def parse_anytime_plan(kind: Kind, stdout: str) -> AnytimePlanned:
    """The figures plan printed under design.analysis=anytime: its cap, P(hypothesis verdict) there and the stop."""
    text = " ".join(stdout.split())  # rich wraps long lines
    found = re.search(r"whole hypothesis: cap (\d+) launches per condition \(run with design.sequential=true "
                      r"design.max_launches=\1\): P\(hypothesis (supported|refuted)\) = ([0-9.]+) ± ([0-9.]+); "
                      r"it stops when every prediction is decided, after ([0-9.]+) ± ([0-9.]+) launches", text)
    if found is None:
        raise SystemExit(f"plan printed no anytime cap for {kind.name}:\n{stdout}")
    cap, target, p, p_se, n, n_se = found.groups()
    return AnytimePlanned(int(cap), float(p), float(p_se), target, float(n), float(n_se), _probe(text))


def parse_plan(kind: Kind, stdout: str) -> Planned:
    """The figures plan printed: its power for the kind's (first) prediction, or none for launch outcomes."""
    text = " ".join(stdout.split())  # rich wraps long lines
    whole = re.search(r"whole hypothesis: (\d+) launches per condition", text)
    if whole is None:
        raise SystemExit(f"plan printed no launches for {kind.name}:\n{stdout}")
    pid = kind.predictions[0]["id"]
    found = re.search(rf"{pid}: power ([0-9.]+) to be (supported|refuted) at (\d+) launches per condition", text)
    if found:
        return Planned(int(found.group(3)), float(found.group(1)), found.group(2), _probe(text))
    if "launch outcomes are counts" not in text:
        raise SystemExit(f"plan printed no power for {kind.name}:\n{stdout}")
    return Planned(int(whole.group(1)), None, "supported", _probe(text))


def run_kind_once(kind: Kind, tmp: Path, launches: int, seed: int, analysis: str = "fixed") -> tuple[Path, int, float]:
    """One run; the verdict goes to the kind's ledger.

    fixed: `launches` per condition, analysed once. anytime: sequential under the anytime rule, capped at
    `launches` per condition, a look after every block (the hypothesis's default block, as plan assumed).
    """
    run_dir = tmp / "runs" / f"{kind.name}-{analysis}-{seed}"
    design = (["design.analysis=anytime", "design.sequential=true", f"design.max_launches={launches}"]
              if analysis == "anytime" else [f"design.launches={launches}", "design.sequential=false"])
    t0 = time.time()
    out = framework(["run", *common_args(kind, tmp), *design, f"design.seed={seed}", f"hydra.run.dir={run_dir}",
                     f"ledger={tmp / f'{kind.name}-{analysis}.jsonl'}", "progress=false", "report=false"], tmp)
    return run_dir, out.returncode, time.time() - t0


def ledger_records(path: Path) -> dict[str, dict[str, Any]]:
    """Per run directory: its verdict record in the ledger (which also holds the hypothesis's registration)."""
    out: dict[str, dict[str, Any]] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            rec = json.loads(line) if line.strip() else {}
            if rec.get("kind") == "verdict":
                out[str(Path(rec["run_dir"]).resolve())] = rec
    return out


def verdicts_of(rec: dict[str, Any]) -> dict[str, str]:
    """Each prediction's verdict, as a verdict record gives it."""
    return {p["id"]: p["verdict"] for p in rec["predictions"]}


def stopped_at(rec: dict[str, Any]) -> int:
    """Launches per condition when the run stopped: its last look's (the looks are in the record's analysis)."""
    return int(rec["analysis"]["stopping"]["looks"][-1]["launches_per_condition"])


def tally(kind: Kind, target: str, verdicts: list[dict[str, str] | None]) -> tuple[int, int, int, dict[str, int]]:
    """(runs, runs whose every prediction of the kind came out `target`, runs without a record, verdict counts)."""
    ids = [p["id"] for p in kind.predictions]
    hits = sum(1 for v in verdicts if v is not None and all(v.get(i) == target for i in ids))
    counts: dict[str, int] = {}
    for v in verdicts:
        for i in ids:
            key = f"{i} {v.get(i, 'none') if v else 'no record'}"
            counts[key] = counts.get(key, 0) + 1
    return len(verdicts), hits, sum(1 for v in verdicts if v is None), counts


def summarize(kind: Kind, planned: Planned, verdicts: list[dict[str, str] | None], walls: list[float]) -> str:
    """One kind's line: planned power, observed rate (binomial SE, Clopper-Pearson 95%), the 2-SE check, time."""
    runs, hits, missing, counts = tally(kind, planned.target, verdicts)
    rate = hits / runs
    ci = stats.binomtest(hits, runs).proportion_ci(method="exact")
    se_obs = math.sqrt(rate * (1 - rate) / runs)
    wall = f"{sum(walls):.0f} s ({sum(walls) / runs:.1f} s per run)"
    detail = ", ".join(f"{k}: {c}" for k, c in sorted(counts.items()))
    if planned.power is None:
        return (f"{kind.name:11s} plan: {planned.launches} launch/condition, no power (launch outcomes are counts); "
                f"observed {planned.target} {hits}/{runs} = {rate:.3f} [CP95 {ci.low:.3f}, {ci.high:.3f}]; rule's "
                f"definition: a crash at start fails every time, so {runs}/{runs} expected -> "
                f"{'as defined' if hits == runs else 'NOT as defined'}; {wall}; {detail}"
                + (f"; {missing} runs left no record" if missing else ""))
    p = planned.power
    se = math.sqrt(p * (1 - p) / runs + p * (1 - p) / planning.DRAWS)  # this run's binomial SE + plan's MC SE
    ok = abs(rate - p) <= 2 * se
    return (f"{kind.name:11s} plan: {planned.launches} launches/condition, power {p:.3f} to be {planned.target}; "
            f"observed {hits}/{runs} = {rate:.3f} +- {se_obs:.3f} [CP95 {ci.low:.3f}, {ci.high:.3f}]; "
            f"|obs - plan| = {abs(rate - p):.3f} vs 2 x combined MC-SE {2 * se:.3f}: "
            f"{'MATCH' if ok else 'MISMATCH'}; {wall}; {detail}" + (f"; {missing} runs left no record" if missing else ""))


def summarize_anytime(kind: Kind, planned: AnytimePlanned, verdicts: list[dict[str, str] | None],
                      stops: list[int | None], walls: list[float]) -> str:
    """One kind's line under anytime: plan's power and expected launches against the runs', each with its 2-SE check."""
    runs, hits, missing, counts = tally(kind, planned.target, verdicts)
    rate = hits / runs
    ci = stats.binomtest(hits, runs).proportion_ci(method="exact")
    p = planned.power
    se_p = math.sqrt(p * (1 - p) / runs + planned.power_se ** 2)  # the runs' binomial SE at plan's power + plan's
    ns = [n for n in stops if n is not None]
    mean_n = sum(ns) / len(ns) if ns else math.nan
    sd_n = math.sqrt(sum((n - mean_n) ** 2 for n in ns) / (len(ns) - 1)) if len(ns) > 1 else math.nan
    se_n = math.sqrt(sd_n ** 2 / len(ns) + planned.launches_se ** 2) if ns else math.nan
    ok_p, ok_n = abs(rate - p) <= 2 * se_p, abs(mean_n - planned.launches) <= 2 * se_n
    hist = ", ".join(f"{n}: {ns.count(n)}" for n in sorted(set(ns)))
    return (f"{kind.name:11s} plan (anytime): cap {planned.cap}, P({planned.target}) {p:.3f} ± {planned.power_se:.3f}, "
            f"{planned.launches:.2f} ± {planned.launches_se:.2f} launches/condition expected; observed {hits}/{runs} "
            f"= {rate:.3f} [CP95 {ci.low:.3f}, {ci.high:.3f}], |obs - plan| {abs(rate - p):.3f} vs 2 x combined "
            f"MC-SE {2 * se_p:.3f}: {'MATCH' if ok_p else 'MISMATCH'}; launches {mean_n:.2f} (sd {sd_n:.2f}), "
            f"|obs - plan| {abs(mean_n - planned.launches):.2f} vs 2 x combined MC-SE {2 * se_n:.2f}: "
            f"{'MATCH' if ok_n else 'MISMATCH'}; stops {{{hist}}}; {sum(walls):.0f} s "
            f"({sum(walls) / runs:.1f} s per run); {', '.join(f'{k}: {c}' for k, c in sorted(counts.items()))}"
            + (f"; {missing} runs left no record" if missing else ""))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30, help="runs per kind (seeds 1..N)")
    ap.add_argument("--quick", action="store_true", help="3 runs per kind: a smoke run, no figure")
    ap.add_argument("--jobs", type=int, default=1, help="runs at a time (the machine's other users count too)")
    ap.add_argument("--kinds", nargs="*", choices=[k.name for k in KINDS],
                    help=f"default: every kind (fixed), {' '.join(ANYTIME_KINDS)} (anytime)")
    ap.add_argument("--power", type=float, default=POWER, help="the power plan is asked for")
    ap.add_argument("--analysis", choices=["fixed", "anytime"], default="fixed",
                    help="fixed: plan's Welch power, fixed designs; anytime: plan's anytime model, sequential runs")
    args = ap.parse_args(argv)
    runs = 3 if args.quick else args.runs
    names = args.kinds or (ANYTIME_KINDS if args.analysis == "anytime" else [k.name for k in KINDS])
    kinds = [k for k in KINDS if k.name in names]
    t_all = time.time()
    what = ("sequential runs under design.analysis=anytime capped at plan's cap" if args.analysis == "anytime"
            else "fixed-design runs")
    print(f"plan power={args.power}, then {runs} {what} per kind (seeds 1..{runs}), {args.jobs} at a time; "
          f"load average at start {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
    lines = []
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        (tmp / "hyp").mkdir()
        for kind in kinds:
            (tmp / "hyp" / f"calib_{kind.name}.yaml").write_text(yaml.safe_dump(kind.hypothesis(), sort_keys=False))
        for kind in kinds:
            t0 = time.time()
            planned = plan_kind(kind, tmp, args.power, args.analysis)
            if isinstance(planned, AnytimePlanned):
                cap = planned.cap
                print(f"{kind.name}: plan ({time.time() - t0:.0f} s) -> cap {cap}, P({planned.target}) "
                      f"{planned.power:.3f} ± {planned.power_se:.3f}, {planned.launches:.2f} ± "
                      f"{planned.launches_se:.2f} launches/condition expected; probe: {planned.probe}", flush=True)
            else:
                cap = planned.launches
                print(f"{kind.name}: plan ({time.time() - t0:.0f} s) -> {planned.launches} launches/condition, "
                      f"power {'-' if planned.power is None else f'{planned.power:.3f}'} to be {planned.target}; "
                      f"probe: {planned.probe}", flush=True)
            with ThreadPoolExecutor(args.jobs) as pool:
                done = list(pool.map(lambda s: run_kind_once(kind, tmp, cap, s, args.analysis), range(1, runs + 1)))
            recorded = ledger_records(tmp / f"{kind.name}-{args.analysis}.jsonl")
            recs = [recorded.get(str(d.resolve())) for d, _, _ in done]
            verdicts = [verdicts_of(r) if r else None for r in recs]
            stops = [stopped_at(r) if r else None for r in recs]
            for seed, ((_, rc, wall), v, n) in enumerate(zip(done, verdicts, stops), 1):
                print(f"  seed {seed:3d}: exit {rc} {wall:5.1f} s  stopped at {n}  {v}", flush=True)
            walls = [w for _, _, w in done]
            lines.append(summarize_anytime(kind, planned, verdicts, stops, walls) if isinstance(planned, AnytimePlanned)
                         else summarize(kind, planned, verdicts, walls))
            print(lines[-1], flush=True)
    print(f"\nsummary ({time.time() - t_all:.0f} s in all; load average at the end {os.getloadavg()[0]:.1f}):")
    for line in lines:
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
