"""`python -m framework fit pilot=RUN_DIR [pilot=RUN_DIR...] [out=PATH] [overwrite=true] [engine=NAME] [name=NAME]`.

Fits the twin's performance-model parameters to one or more pilot runs' trials (any backend) and
writes the twin (YAML; a sim profile: `backend=sim sim_profile=PATH`) with each parameter's estimate
and standard error, or why the pilot could not identify it. The model's equations are the sim's,
reached through the backend table's adapter (framework.execution.adapters). docs/model.md, "Twin".
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from framework.analysis import twinfit
from framework.core.trials import Trials
from framework.core.twin import PARAMETERS, TwinFit
from framework.errors import EXIT_OK, ConfigError, TrialsFileError
from framework.execution import adapters
from framework.execution.backends import BACKENDS
from framework.present.format import percent, sig
from framework.records.trials import read_trials

KEYS = ("pilot", "out", "overwrite", "engine", "name")
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
    if opts.get("overwrite", "false") not in ("true", "false"):
        raise ConfigError("command line", "overwrite", f"true or false (got {opts['overwrite']!r})")
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


def out_path(value: str, overwrite: bool) -> Path:
    """`out=`, checked before anything is fitted: a regular file to create (or, with overwrite=true, to replace)
    whose nearest existing ancestor is a writable directory. A user's hypothesis file is never replaced silently."""
    out = Path(value)
    if out.is_dir():
        raise ConfigError("command line", "out", f"{value} is a directory; name the twin's file (out=DIR/twin.yaml)")
    if out.exists() or out.is_symlink():
        if not out.is_file():
            raise ConfigError("command line", "out", f"{value} exists and is not a regular file")
        if not overwrite:
            raise ConfigError("command line", "out", f"{value} exists; add overwrite=true to replace it, or name "
                                                     "another file")
    parent = out.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise ConfigError("command line", "out", f"cannot write {value}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK) or (out.exists() and not os.access(out, os.W_OK)):
        raise ConfigError("command line", "out", f"cannot write {value}: permission denied")
    return out


def write_twin(out: Path, fitted: TwinFit) -> None:
    """The twin's YAML, written whole (a temporary file beside it, then renamed) or not at all."""
    text = yaml.safe_dump(fitted.model_dump(mode="json"), sort_keys=False)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f".{out.name}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, out)
    except OSError as exc:
        raise ConfigError("command line", "out", f"cannot write {out}: {exc.strerror or exc}") from None


def main(args: list[str]) -> int:
    pilots, opts = parse(args)
    overwrite = opts.get("overwrite") == "true"
    out = out_path(opts["out"], overwrite) if "out" in opts else None  # the default name waits for the engine
    launches: list[twinfit.Launch] = []
    sources, engines = [], set()
    startups: list[float] = []
    hosts: list[dict[str, Any]] = []
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
        hosts.append(twinfit.pilot_host(rows))
    if len(engines) > 1:
        which = ", ".join(sorted(engines))
        raise ConfigError("command line", "pilot", f"the pilots measured different engines ({which}); fit one")
    engine = engines.pop()
    odd = twinfit.implausible(launches)
    if odd:
        more = f" (and {len(odd) - 3} more)" if len(odd) > 3 else ""
        raise ConfigError("command line", "pilot", f"implausible measured values, not fitted: {'; '.join(odd[:3])}"
                                                   f"{more}")
    if out is None:
        out = out_path(f"twin_{engine}.yaml", overwrite)
    model = adapters.for_row(BACKENDS["sim"])
    assert model is not None
    try:
        fitted = twinfit.fit(launches, model.twin_predict, engine=engine, name=opts.get("name", f"twin_{engine}"),
                             reference_threads=reference_threads(launches), pilots=sources,
                             fixed={"launch_startup_s": statistics.median(startups)} if startups else {})
    except twinfit.FitError as exc:
        raise ConfigError("command line", "pilot", f"nothing fittable: {exc}") from None
    host = hosts[0] if len(hosts) == 1 else {"pilots": hosts}
    fitted = fitted.model_copy(update={"pilot_host": host, "busy": twinfit.busy(hosts, fitted.noise)})
    write_twin(out, fitted)
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
    for group in fit.noise_by_flags:
        sds = ", ".join(f"{m} {percent(nz.residual_log_sd)} (df {nz.residual_df})" for m, nz in group.noise.items())
        console.print(escape(f"  at flags {' '.join(group.flags) or '(none)'}: residual sd {sds}"), highlight=False)
    for note in fit.notes:
        console.print(f"  note: {note}")
    if fit.domain is not None:
        dm = fit.domain
        console.print(escape(f"  domain (predictions outside it are marked as extrapolations): streams "
                             f"{dm.concurrency[0]}-{dm.concurrency[1]}, prompt tokens {dm.prompt_tokens[0]}-"
                             f"{dm.prompt_tokens[1]}, output tokens {dm.output_tokens[0]}-{dm.output_tokens[1]}, "
                             f"tp size {', '.join(map(str, dm.tp_size))}, {len(dm.flags)} flag set(s)"),
                      highlight=False)
    for h in fit.pilot_host.get("pilots", [fit.pilot_host]):
        console.print(escape(f"  pilot host {h.get('host')}: {h.get('cpu') or 'CPU not recorded'}, "
                             f"{h.get('cores') or '?'} cores, load average "
                             + (f"{sig(h['load_1m_median'], 3)} median, {sig(h['load_1m_max'], 3)} max over "
                                f"{h['launches_with_load']} launches" if h.get("load_1m_max") is not None
                                else "not recorded (a pilot from before issue 35)")), highlight=False)
    for why in fit.busy:
        console.print(escape(f"warning: the pilot's machine looked busy ({why}): the twin may describe the "
                             "machine's load rather than the deployment; refit from a pilot on a quiet machine"),
                      style="bold red", highlight=False)
    console.print(f"twin: {out}  (serve it: backend=sim sim_profile={out})")
