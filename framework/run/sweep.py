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
(1 / the largest e-value; docs/statistics.md, sections 5, 8 and 10). The adjusted verdict can only
be more cautious than the job's own: a `supported`
prediction (or job) whose adjusted test does not reject becomes `inconclusive`; `refuted` and
`inconclusive` are kept. Predictions without a p-value (e.g. launch outcomes) stay out of the family.

`summarize` is the pure part (records in, summary dict out); `write_summary`, `load_sweep` and the
callback do the I/O. When the jobs run in other processes or on other nodes (any launcher but Hydra's
in-process one; SLURM through submitit), the callback is also the sweep's only ledger writer: it
registers every job's hypothesis before the jobs start and appends the records they return, in job
order, before the summary (:mod:`framework.run.handoff`). Jobs without a `verdict.json` (the job
failed, or never started) are rows with status `failed`.
"""

from __future__ import annotations

import atexit
import json
import re
import sys
from pathlib import Path
from typing import Any, Sequence

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from framework.analysis.sweep import summarize
from framework.present.sweep import print_summary, to_markdown
from framework.records.trials import read_json_object
from framework.run.handoff import pending_dirs, record_pending, register_jobs, submitter_appends
from framework.run.outcomes import OUTCOMES

SUMMARY_JSON = "sweep_summary.json"
SUMMARY_MD = "sweep_summary.md"
JOB_STATUS = "job_status.json"  # written by the callback's on_job_end into each job directory


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
        if submitter_appends(config.hydra):  # jobs run elsewhere: registrations first, from here (run.handoff)
            register_jobs(config, expected_jobs(config) or [])

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
        if submitter_appends(config.hydra):  # the jobs' records, appended here and only here (run.handoff)
            for line in record_pending(pending_dirs(sweep_dir)):
                print(f"error: {line}", file=sys.stderr)
                OUTCOMES.unrecorded.append(line)
        summary = write_summary(sweep_dir, method, alpha, expected=expected_jobs(config))
        print(f"Sweep summary: {sweep_dir / SUMMARY_MD}")
        empty = [r for r in summary["jobs"] if r.get("no_data")]
        for r in empty:
            print(f"error: no data in job {r['job']}: {'; '.join(r['no_data'].values())}; its verdict is recorded as "
                  f"inconclusive ({r.get('run_dir')})", file=sys.stderr)
        OUTCOMES.no_data.extend(str(r.get("run_dir")) for r in empty)
