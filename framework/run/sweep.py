"""The sweep summary: one row per job of a Hydra multirun, with multiplicity-adjusted decisions.

A multirun (`python -m framework run -m hypothesis=a,b ...`) runs one job per combination of the
swept values; each job writes its verdict record as `verdict.json` into its own directory under
the sweep directory, next to Hydra's `.hydra/overrides.yaml`. At the end of the multirun the
`SweepSummary` callback reads them all and writes `sweep_summary.json` and `sweep_summary.md`
into the sweep directory, and prints the table.

Register it in the primary config (`conf/config.yaml`):

    hydra:
      callbacks:
        sweep_summary:
          _target_: framework.run.sweep.SweepSummary

Multiplicity. Each job decides its own predictions at its own level. Across a sweep, the
predictions that carry a p-value form one family, and the summary adds an adjusted p-value and
decision for each (`sweep.multiplicity`, `sweep.alpha` in the config):

- `holm` (default, confirmatory): Holm's step-down procedure, controls the family-wise error
  rate (Holm 1979, Scand. J. Statist. 6:65-70).
- `fdr_bh` (exploratory): Benjamini-Hochberg, controls the false discovery rate
  (Benjamini & Hochberg 1995, JRSS B 57:289-300).

The jobs' verdicts form a second family: a hypothesis is supported only if all its predictions
are (an intersection-union test), so a job's p-value is the largest of its predictions' and the
same method adjusts those (jobs with a prediction lacking a p-value stay out). The methods are
`framework.stats.multiplicity.adjust`.

A prediction's p-value is the p-value of the test behind its verdict (small = evidence for the
prediction). A sequential or anytime-valid job's fixed-sample p-value is not a valid p-value under
optional stopping, so the family takes the one that is, when the record holds it:
`details.p_sequential` (the repeated p-value of a group-sequential stop) or `details.p_anytime`
(1 / the largest e-value; docs/statistics.md, sections 5, 8 and 10). The adjusted verdict can only be more cautious than the job's own: a `supported`
prediction (or job) whose adjusted test does not reject becomes `inconclusive`; `refuted` and
`inconclusive` are kept. Predictions without a p-value (e.g. launch outcomes) stay out of the family.

`summarize` is the pure part (records in, summary dict out); `write_summary`, `load_sweep` and the
callback do the I/O. Jobs without a `verdict.json` (the job failed, or never started) are rows
with status `failed`.
"""

from __future__ import annotations

import atexit
import json
import math
import re
import sys
from pathlib import Path
from typing import Any, Sequence

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from framework.records.trials import read_json_object

SCHEMA = "framework.sweep_summary/1"
METHODS = {"holm": "Holm (family-wise error rate, confirmatory)",
           "fdr_bh": "Benjamini-Hochberg (false discovery rate, exploratory)"}
VERDICTS = ("supported", "refuted", "inconclusive")
SUMMARY_JSON = "sweep_summary.json"
SUMMARY_MD = "sweep_summary.md"
JOB_STATUS = "job_status.json"  # written by the callback's on_job_end into each job directory
NO_DATA_JOBS: list[str] = []  # run dirs of this process's sweep jobs that measured nothing: `run` then exits 3


# --------------------------------------------------------------------------- the pure core


def valid_p_value(prediction: dict[str, Any]) -> Any:
    """The p-value that stays valid under the job's stopping rule (sequential or anytime), else the fixed one."""
    details = prediction.get("details") or {}
    for key in ("p_anytime", "p_sequential"):
        if _is_p(details.get(key)):
            return details[key]
    return prediction.get("p_value")


def adjust(p_values: Sequence[float], method: str, alpha: float) -> tuple[list[bool], list[float]]:
    """Reject decisions and adjusted p-values of a family of tests (`framework.stats.multiplicity`)."""
    from framework.stats.multiplicity import adjust as stats_adjust

    if method not in METHODS:
        raise ValueError(f"unknown multiplicity method {method!r}; allowed: {sorted(METHODS)}")
    result = stats_adjust(list(p_values), method, alpha)
    return list(result.reject), list(result.p_adjusted)


def _is_p(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        and 0.0 <= value <= 1.0


def summarize(job_records: Sequence[dict[str, Any] | None], overrides: Sequence[Sequence[str]],
              method: str = "holm", alpha: float = 0.05, *,
              jobs: Sequence[int | str] | None = None,
              errors: Sequence[str | None] | None = None) -> dict[str, Any]:
    """The sweep summary of one multirun.

    `job_records[i]` is job i's verdict record (the dict of `verdict.json`), or None when the job
    produced none (failed); `overrides[i]` is its override list. `jobs` gives the job numbers
    (default 0..n-1) and `errors` an optional failure message per job. Returns a JSON-ready dict:
    `jobs` (one row per job, predictions with their adjusted p-value and decision),
    `multiplicity`, `counts` and `varying` (the override keys whose values differ across jobs).
    """
    if len(job_records) != len(overrides):
        raise ValueError(f"{len(job_records)} job records but {len(overrides)} override lists")
    if method not in METHODS:
        raise ValueError(f"unknown multiplicity method {method!r}; allowed: {sorted(METHODS)}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    numbers = list(jobs) if jobs is not None else list(range(len(job_records)))
    errs = list(errors) if errors is not None else [None] * len(job_records)

    rows: list[dict[str, Any]] = []
    family: list[tuple[int, int]] = []  # (row index, prediction index) of each p-value in the family
    p_values: list[float] = []
    for i, (rec, ovr) in enumerate(zip(job_records, overrides)):
        row: dict[str, Any] = {"job": numbers[i], "overrides": list(ovr)}
        if not rec:
            row.update(status="failed", hypothesis=_hypothesis_from_overrides(ovr), backend=None,
                       verdict=None, predictions=[], error=errs[i] or "no verdict.json (the job failed or never ran)")
            rows.append(row)
            continue
        hyp = rec.get("hypothesis") or {}
        row.update(status="ok", hypothesis=hyp.get("name") if isinstance(hyp, dict) else str(hyp),
                   backend=rec.get("backend"), verdict=rec.get("verdict"), predictions=[],
                   record_hash=rec.get("hash"), run_dir=rec.get("run_dir"),
                   no_data=((rec.get("analysis") or {}).get("details") or {}).get("no_data") or None)
        for j, p in enumerate(rec.get("predictions") or []):
            pv = valid_p_value(p)
            row["predictions"].append({
                "id": p.get("id"), "kind": p.get("kind"), "verdict": p.get("verdict"),
                "estimate": p.get("estimate"), "ci": p.get("ci"), "p_value": pv,
                "p_adjusted": None, "significant_adjusted": None, "adjusted_verdict": p.get("verdict"),
            })
            if _is_p(pv):
                family.append((i, j))
                p_values.append(float(pv))
        rows.append(row)

    reject, p_adj = adjust(p_values, method, alpha)
    for (i, j), rej, pa in zip(family, reject, p_adj):
        pred = rows[i]["predictions"][j]
        pred["p_adjusted"] = pa
        pred["significant_adjusted"] = rej
        if pred["verdict"] == "supported" and not rej:
            pred["adjusted_verdict"] = "inconclusive"

    # The jobs' own verdicts as a second family: a hypothesis is supported only if all its
    # predictions are (an intersection-union test), so its p-value is the largest of theirs.
    job_family = [i for i, r in enumerate(rows)
                  if r["status"] == "ok" and r["predictions"] and all(_is_p(p["p_value"]) for p in r["predictions"])]
    job_p = [max(float(p["p_value"]) for p in rows[i]["predictions"]) for i in job_family]
    for r in rows:
        r.update(p_value=None, p_adjusted=None, adjusted_verdict=r["verdict"])
    job_reject, job_adj = adjust(job_p, method, alpha)
    for i, pv, rej, pa in zip(job_family, job_p, job_reject, job_adj):
        rows[i].update(p_value=pv, p_adjusted=pa)
        if rows[i]["verdict"] == "supported" and not rej:
            rows[i]["adjusted_verdict"] = "inconclusive"

    def tally(key: str) -> dict[str, int]:
        preds = [p for r in rows for p in r["predictions"]]
        return {v: sum(1 for p in preds if p[key] == v) for v in VERDICTS}

    ok = [r for r in rows if r["status"] == "ok"]
    return {
        "schema": SCHEMA,
        "multiplicity": {"method": method, "description": METHODS[method], "alpha": alpha,
                         "family_size": len(p_values),
                         "family": "every prediction with a p-value, across all jobs of the sweep",
                         "job_family_size": len(job_p),
                         "job_family": "every ok job whose predictions all have p-values; "
                                       "job p-value = the largest of its predictions' (intersection-union)"},
        "counts": {
            "jobs": len(rows), "ok": len(ok), "failed": len(rows) - len(ok),
            "job_verdicts": {v: sum(1 for r in ok if r["verdict"] == v) for v in VERDICTS},
            "job_verdicts_adjusted": {v: sum(1 for r in ok if r["adjusted_verdict"] == v) for v in VERDICTS},
            "predictions": tally("verdict"),
            "predictions_adjusted": tally("adjusted_verdict"),
        },
        "varying": _varying_keys([r["overrides"] for r in rows]),
        "jobs": rows,
    }


def _hypothesis_from_overrides(overrides: Sequence[str]) -> str | None:
    for o in overrides:
        if o.startswith("hypothesis="):
            return o.split("=", 1)[1]
    return None


def _varying_keys(all_overrides: Sequence[Sequence[str]]) -> list[str]:
    """Override keys whose value differs between jobs (or that some jobs lack), in first-seen order."""
    per_job = [{o.partition("=")[0].lstrip("+~"): o.partition("=")[2] for o in ovr} for ovr in all_overrides]
    keys = list(dict.fromkeys(k for job in per_job for k in job))
    return [k for k in keys if len({job.get(k) for job in per_job}) > 1]


# --------------------------------------------------------------------------- rendering


def _num(x: Any, fmt: str = "{:.3f}") -> str:
    return fmt.format(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else "-"


def _p(x: Any) -> str:
    if not isinstance(x, (int, float)) or isinstance(x, bool):
        return "-"
    return f"{x:.2g}" if x < 0.001 else f"{x:#.3g}"  # 3 significant digits, kept: 0.0500, 0.0502


def _ci(ci: Any) -> str:
    return f"[{_num(ci[0])}, {_num(ci[1])}]" if isinstance(ci, (list, tuple)) and len(ci) == 2 else "-"


def prediction_line(p: dict[str, Any]) -> str:
    """`id: verdict (est [lo, hi], p, p_adj -> adjusted verdict)` for one prediction of a row."""
    s = f"{p['id']}: {p['verdict']} ({_num(p['estimate'])} {_ci(p['ci'])}, p={_p(p['p_value'])}"
    if p.get("p_adjusted") is not None:
        s += f", p_adj={_p(p['p_adjusted'])}"
    s += ")"
    if p.get("adjusted_verdict") != p.get("verdict"):
        s += f" -> {p['adjusted_verdict']} (adjusted)"
    return s


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", "<br>")


def to_markdown(summary: dict[str, Any]) -> str:
    m, c = summary["multiplicity"], summary["counts"]
    out = [
        "# Sweep summary", "",
        f"{c['jobs']} jobs: {c['ok']} ok, {c['failed']} failed. "
        f"Multiplicity: {m['description']} at alpha = {m['alpha']}, over the {m['family_size']} predictions "
        f"with a p-value and, separately, over the {m['job_family_size']} jobs whose predictions all have one "
        "(a job's p-value is the largest of its predictions'). Adjustment only turns `supported` into "
        "`inconclusive`.", "",
        "| job | status | hypothesis | backend | verdict | p (largest) | p adjusted | adjusted verdict | overrides |",
        "|---:|---|---|---|---|---:|---:|---|---|",
    ]
    for r in summary["jobs"]:
        out.append("| " + " | ".join(_md_cell(str(x)) for x in (
            r["job"], r["status"], r["hypothesis"] or "-", r["backend"] or "-", r["verdict"] or "-",
            _p(r.get("p_value")), _p(r.get("p_adjusted")), r.get("adjusted_verdict") or "-",
            " ".join(f"`{o}`" for o in r["overrides"]) or "-")) + " |")
    out += ["", "## Predictions", "",
            "| job | hypothesis | prediction | kind | verdict | estimate | CI | p | p adjusted | adjusted verdict |",
            "|---:|---|---|---|---|---:|---|---:|---:|---|"]
    for r in summary["jobs"]:
        for p in r["predictions"]:
            out.append("| " + " | ".join(_md_cell(str(x)) for x in (
                r["job"], r["hypothesis"], p["id"], p["kind"], p["verdict"], _num(p["estimate"]), _ci(p["ci"]),
                _p(p["p_value"]), _p(p["p_adjusted"]), p["adjusted_verdict"])) + " |")
    failed = [r for r in summary["jobs"] if r["status"] == "failed"]
    if failed:
        out += ["", "## Failed jobs", ""]
        out += [f"- job {r['job']} ({' '.join(r['overrides'])}): {_md_cell(str(r.get('error')))}" for r in failed]
    return "\n".join(out) + "\n"


_STYLE = {"supported": "green", "refuted": "red", "inconclusive": "yellow", "failed": "bold red"}


def print_summary(summary: dict[str, Any], console: Any = None) -> None:
    """The sweep as a rich table: a line per job (its overall verdict), then one per prediction."""
    from rich.console import Console
    from rich.table import Table

    if console is None:
        console = Console()
        if not console.is_terminal:  # logs and CI: do not wrap at 80 columns
            console = Console(width=160)
    m, c = summary["multiplicity"], summary["counts"]
    table = Table(title=f"Sweep summary: {c['ok']}/{c['jobs']} jobs ok; {m['method']} at alpha={m['alpha']}")
    for col in ("job", "hypothesis / prediction", "backend", "verdict", "estimate [CI]", "p", "p adj",
                "adjusted", "overrides"):
        table.add_column(col, overflow="fold")
    varying = set(summary.get("varying") or [])

    def styled(v: Any) -> str:
        return f"[{_STYLE[v]}]{v}[/]" if v in _STYLE else str(v or "-")

    for r in summary["jobs"]:
        shown = [o for o in r["overrides"] if o.partition("=")[0].lstrip("+~") in varying] or r["overrides"]
        if r["status"] != "ok":
            table.add_row(str(r["job"]), r["hypothesis"] or "-", "-", styled("failed"), r.get("error") or "-",
                          "", "", "", " ".join(shown), end_section=True)
            continue
        table.add_row(str(r["job"]), f"[bold]{r['hypothesis']}[/]", r["backend"] or "-", styled(r["verdict"]), "",
                      _p(r.get("p_value")), _p(r.get("p_adjusted")), styled(r.get("adjusted_verdict")), " ".join(shown))
        for i, p in enumerate(r["predictions"]):
            table.add_row("", f"  {p['id']}", "", styled(p["verdict"]), f"{_num(p['estimate'])} {_ci(p['ci'])}",
                          _p(p["p_value"]), _p(p["p_adjusted"]), styled(p["adjusted_verdict"]), "",
                          end_section=i == len(r["predictions"]) - 1)
    console.print(table)


# --------------------------------------------------------------------------- the I/O shell


def _job_number(job_dir: Path) -> int | str:
    hydra_yaml = job_dir / ".hydra" / "hydra.yaml"
    if hydra_yaml.exists():
        try:
            num = OmegaConf.select(OmegaConf.load(hydra_yaml), "hydra.job.num")
            if num is not None:
                return int(num)
        except Exception:  # an unreadable hydra.yaml: fall back to the directory name
            pass
    m = re.match(r"(\d+)", job_dir.name)
    return int(m.group(1)) if m else job_dir.name


def load_sweep(sweep_dir: Path, expected: Sequence[Sequence[str]] | None = None) -> dict[str, list[Any]]:
    """Every job directory under `sweep_dir` (a directory with `.hydra/overrides.yaml`).

    `expected` (the override list of every job, by job number) adds rows for jobs that left no
    directory at all. Returns `jobs`, `records`, `overrides`, `errors`, sorted by job number.
    """
    found: dict[int | str, tuple[dict[str, Any] | None, list[str], str | None]] = {}
    for ov_file in sorted(sweep_dir.rglob(".hydra/overrides.yaml")):
        job_dir = ov_file.parent.parent
        if ".submitit" in job_dir.relative_to(sweep_dir).parts:
            continue
        try:
            overrides = [str(o) for o in (OmegaConf.to_container(OmegaConf.load(ov_file)) or [])]
        except Exception:
            overrides = []
        record = read_json_object(job_dir / "verdict.json")
        status = read_json_object(job_dir / JOB_STATUS) or {}
        error = status.get("error") if status.get("status") == "failed" else None
        if record is None and error is None:
            error = f"no verdict.json in {job_dir.name}"
        found[_job_number(job_dir)] = (record, overrides, error)
    for num, ovr in enumerate(expected or []):
        if num not in found:
            found[num] = (None, list(ovr), "no job directory: the job never started")
    order = sorted(found, key=lambda k: (0, k, "") if isinstance(k, int) else (1, 0, str(k)))
    return {"jobs": order, "records": [found[k][0] for k in order],
            "overrides": [found[k][1] for k in order], "errors": [found[k][2] for k in order]}


def write_summary(sweep_dir: Path, method: str = "holm", alpha: float = 0.05,
                  expected: Sequence[Sequence[str]] | None = None, console: Any = None) -> dict[str, Any]:
    """Summarize the sweep in `sweep_dir`, write both files there, print the table; returns the summary."""
    sweep_dir = Path(sweep_dir)
    loaded = load_sweep(sweep_dir, expected)
    summary = summarize(loaded["records"], loaded["overrides"], method, alpha,
                        jobs=loaded["jobs"], errors=loaded["errors"])
    summary["sweep_dir"] = str(sweep_dir)
    tmp = sweep_dir / (SUMMARY_JSON + ".tmp")
    tmp.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    tmp.replace(sweep_dir / SUMMARY_JSON)
    (sweep_dir / SUMMARY_MD).write_text(to_markdown(summary), encoding="utf-8")
    print_summary(summary, console)
    return summary


def expected_jobs(config: DictConfig) -> list[list[str]] | None:
    """The override list of every job of a basic-sweeper multirun, as Hydra's BasicSweeper builds them.

    None for other sweepers (their jobs are only known from the directories they leave).
    """
    try:
        if "BasicSweeper" not in str(OmegaConf.select(config, "hydra.sweeper._target_") or ""):
            return None
        from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
        from hydra.core.override_parser.overrides_parser import OverridesParser

        params = OmegaConf.select(config, "hydra.sweeper.params") or {}
        args = [f"{k}={v}" for k, v in params.items()] + list(OmegaConf.select(config, "hydra.overrides.task") or [])
        parsed = OverridesParser.create().parse_overrides(args)
        return [list(job) for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]
    except Exception:  # a sweep this cannot expand (e.g. glob over config groups): rely on directories
        return None


class SweepSummary(Callback):
    """Hydra callback: writes `sweep_summary.{json,md}` into the sweep directory and prints it.

    `method`/`alpha` default to the config's `sweep.multiplicity` and `sweep.alpha` (holm, 0.05).
    Each job also gets a `job_status.json` (status, and the error of a failed job). Hydra does not
    call `on_multirun_end` when a job fails (the sweep raises), so the summary is then written at
    interpreter exit instead, with the failed jobs as rows.
    """

    def __init__(self, method: str | None = None, alpha: float | None = None) -> None:
        self.method = method
        self.alpha = alpha
        self._pending: DictConfig | None = None

    def _settings(self, config: DictConfig) -> tuple[str, float]:
        method = self.method or OmegaConf.select(config, "sweep.multiplicity", default=None) or "holm"
        alpha = self.alpha if self.alpha is not None else OmegaConf.select(config, "sweep.alpha", default=None)
        return str(method), float(alpha if alpha is not None else 0.05)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        # Import now what writing needs: modules imported during interpreter shutdown may fail
        # (some register atexit hooks of their own, which is refused then).
        import rich.table  # noqa: F401
        import statsmodels.stats.multitest  # noqa: F401

        import framework.stats.multiplicity  # noqa: F401

        self._pending = config
        atexit.register(self._at_exit)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self._pending = None
        self._write(config)

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        from hydra.core.utils import JobStatus

        try:
            if str(OmegaConf.select(config, "hydra.mode", default="")) != "RunMode.MULTIRUN":
                return  # a single run has no sweep summary to feed
            out = Path(str(config.hydra.runtime.output_dir))
            failed = getattr(job_return, "status", None) == JobStatus.FAILED
            status: dict[str, Any] = {"status": "failed" if failed else "completed"}
            if failed:
                exc = getattr(job_return, "_return_value", None)
                status["error"] = (f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)[:2000]
            (out / JOB_STATUS).write_text(json.dumps(status) + "\n", encoding="utf-8")
        except Exception:  # never let bookkeeping fail a job
            pass

    def _at_exit(self) -> None:
        if self._pending is not None:
            config, self._pending = self._pending, None
            try:
                self._write(config)
            except Exception as exc:  # at exit there is nobody left to raise to
                print(f"sweep summary: not written: {exc}")

    def _write(self, config: DictConfig) -> None:
        method, alpha = self._settings(config)
        sweep_dir = Path(str(config.hydra.sweep.dir))
        if not sweep_dir.is_dir():
            return
        summary = write_summary(sweep_dir, method, alpha, expected=expected_jobs(config))
        print(f"Sweep summary: {sweep_dir / SUMMARY_MD}")
        empty = [r for r in summary["jobs"] if r.get("no_data")]
        for r in empty:
            print(f"error: no data in job {r['job']}: {'; '.join(r['no_data'].values())}; its verdict is recorded as "
                  f"inconclusive ({r.get('run_dir')})", file=sys.stderr)
        NO_DATA_JOBS.extend(str(r.get("run_dir")) for r in empty)
