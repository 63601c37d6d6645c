"""`python -m framework fit pilot=RUN_DIR [pilot=RUN_DIR...] [out=PATH] [engine=NAME] [name=NAME]`.

Fits the twin's performance-model parameters to one or more pilot runs' trials (any backend) and
writes the twin (YAML; a sim profile: `backend=sim sim_profile=PATH`) with each parameter's estimate
and standard error, or why the pilot could not identify it. The model's equations are the sim's,
reached through the backend table's adapter (framework.execution.adapters). docs/model.md, "Twin".
"""

from __future__ import annotations

import hashlib
import json
import statistics
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

from framework.analysis import twinfit
from framework.core.trials import Trials
from framework.core.twin import PARAMETERS, TwinFit
from framework.errors import EXIT_OK, ConfigError, TrialsFileError
from framework.execution import adapters
from framework.execution.backends import BACKENDS
from framework.present.format import percent, sig
from framework.records.trials import read_trials

KEYS = ("pilot", "out", "engine", "name")
ENGINES = ("sglang", "gpu", "llamacpp", "llama_server", "vllm")


def parse(args: list[str]) -> tuple[list[str], dict[str, str]]:
    pilots: list[str] = []
    opts: dict[str, str] = {}
    for arg in args:
        key, sep, value = arg.partition("=")
        if not sep or key not in KEYS or not value:
            raise ConfigError("command line", arg, f"expected KEY=VALUE with KEY one of {', '.join(KEYS)}")
        if key == "pilot":
            pilots.append(value)
        else:
            opts[key] = value
    if not pilots:
        raise ConfigError("command line", "pilot", "missing: pilot=RUN_DIR (a run directory with trials.jsonl)")
    if "engine" in opts and opts["engine"] not in ENGINES:
        raise ConfigError("command line", "engine", f"{opts['engine']!r}; allowed: {', '.join(ENGINES)}")
    return pilots, opts


def engine_of(rows: list[dict[str, Any]], run_dir: Path) -> str:
    """The engine a pilot measured: its backend, or for the sim the twin it served (sglang otherwise)."""
    trials = Trials(rows)
    env = next(iter(trials.of_kind("environment")), None)
    backend = env.get("backend") if env else None
    if backend is None and (run_dir / "verdict.json").is_file():
        backend = json.loads((run_dir / "verdict.json").read_text()).get("backend")
    if backend in ("sim", "endpoint", "command", None):
        for r in trials.of_kind("launch"):
            info = r.get("server_info")
            version = str((info or {}).get("sim_version") or "")
            if version.startswith("twin-"):
                return version.removeprefix("twin-")
        return "sglang"
    return str(backend)


def reference_threads(launches: list[twinfit.Launch]) -> int | None:
    from framework.execution.adapters import planning_model

    summary = planning_model().twin_engine_summary
    threads = sorted({t for x in launches if (t := summary(x.config).get("threads"))})
    return threads[0] if threads else None


def main(args: list[str]) -> int:
    pilots, opts = parse(args)
    launches: list[twinfit.Launch] = []
    sources, engines = [], set()
    startups: list[float] = []
    for p in pilots:
        run_dir = Path(p)
        trials = run_dir / "trials.jsonl"
        if not run_dir.is_dir():
            raise ConfigError("command line", "pilot", f"{p}: no such run directory")
        if not trials.is_file():
            raise ConfigError("command line", "pilot", f"{p}: no trials.jsonl (not a run directory)")
        try:
            rows = read_trials(trials)
        except TrialsFileError as exc:
            raise ConfigError("command line", "pilot", str(exc)) from None
        engine = opts.get("engine") or engine_of(rows, run_dir)
        startups += [float(r["startup_s"]) for r in Trials(rows).of_kind("launch") if r.get("startup_s")]
        engines.add(engine)
        got = twinfit.launches_from_rows(rows, engine)
        if not got:
            raise ConfigError("command line", "pilot", f"{p}: no measured closed-loop launch to fit (needs ok "
                                                       "launches with measured requests)")
        launches += [twinfit.Launch(f"{run_dir.name}/{x.launch_id}", f"{run_dir.name}/{x.condition}", x.config,
                                    x.values, x.accept) for x in got]
        sources.append({"path": str(run_dir), "trials_sha256": hashlib.sha256(trials.read_bytes()).hexdigest(),
                        "launches": len(got), "engine": engine})
    if len(engines) > 1:
        which = ", ".join(sorted(engines))
        raise ConfigError("command line", "pilot", f"the pilots measured different engines ({which}); fit one")
    engine = engines.pop()
    model = adapters.for_row(BACKENDS["sim"])
    assert model is not None
    try:
        fitted = twinfit.fit(launches, model.twin_predict, engine=engine, name=opts.get("name", f"twin_{engine}"),
                             reference_threads=reference_threads(launches), pilots=sources,
                             fixed={"launch_startup_s": statistics.median(startups)} if startups else {})
    except twinfit.FitError as exc:
        raise ConfigError("command line", "pilot", f"nothing fittable: {exc}") from None
    out = Path(opts.get("out", f"twin_{engine}.yaml"))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(fitted.model_dump(mode="json"), sort_keys=False), encoding="utf-8")
    show(fitted, out)
    return EXIT_OK


def show(fit: TwinFit, out: Path) -> None:
    console = Console(width=120)
    t = Table(title=f"twin of {fit.engine}: {fit.configs_fitted} configurations, "
                    f"{sum(int(p['launches']) for p in fit.pilots)} launches")
    for col in ("parameter", "estimate", "se", "unit", "identifiable"):
        t.add_column(col)
    for name, p in fit.parameters.items():
        t.add_row(name, sig(p.estimate, 4), sig(p.se, 3), PARAMETERS[name][0],
                  "yes" if p.identifiable else f"no: {p.reason}; vary {p.needs}")
    console.print(t)
    for m, nz in fit.noise.items():
        sd = {k: percent(v, missing="not estimable") for k, v in (("launch", nz.launch_log_sd),
                                                                  ("request", nz.request_log_sd))}
        console.print(f"  {m}: launch sd {sd['launch']}, request sd {sd['request']}, "
                      f"residual sd {percent(nz.residual_log_sd)} (log scale, df {nz.residual_df})")
    for note in fit.notes:
        console.print(f"  note: {note}")
    console.print(f"twin: {out}  (serve it: backend=sim sim_profile={out})")
