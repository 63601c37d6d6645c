"""`python -m framework bisect hypothesis=NAME [run_dir=DIR] [KEY=VALUE...]`: find the version between a good and
a bad one that changed the metric, under the registered alpha (framework.run.bisect).

Every check (the bisect block, the versions as conditions, the repository and its commits or each version's
interpreter, the backend, the sim's coverage) runs before any server starts: a problem is one line and exit 2.
Exit 0 when the bisection named a version or found no change; 3 when it ended undecided or a version failed.
"""

from __future__ import annotations

import sys
from pathlib import Path

from framework.cli.args import kv_pairs
from framework.errors import EXIT_NO_DATA, EXIT_OK, ConfigError
from framework.execution.backends import remote_listen_warning
from framework.run.bisect import bisect, default_run_dir, refuse_existing, resolve_bisect
from framework.run.preflight import output_dir_problem

BISECT_KEYS = ("run_dir",)


def main(args: list[str]) -> int:
    kv = kv_pairs(args)
    overrides = [a for a in args if a.partition("=")[0] not in BISECT_KEYS]
    cwd = Path.cwd()
    try:
        setup = resolve_bisect(overrides, cwd)
    except ConfigError as exc:
        if "." in exc.field or "unknown key" not in exc.message:
            raise
        raise ConfigError(exc.file, exc.field, f"{exc.message}; and bisect's own: {', '.join(BISECT_KEYS)}") from None
    remote = remote_listen_warning(setup.resolved.backend)
    if remote is not None:
        print(remote, file=sys.stderr)
    run_dir = Path(kv["run_dir"]) if kv.get("run_dir") else default_run_dir(setup.hypothesis, cwd)
    refuse_existing(run_dir)
    problem = output_dir_problem(run_dir)
    if problem:
        raise ConfigError("command line", "run_dir", problem)
    summary = bisect(setup, run_dir, cwd)
    return EXIT_OK if summary["outcome"] in ("named", "no_change") else EXIT_NO_DATA  # undecided, failed, stopped
