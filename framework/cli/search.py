"""`python -m framework search hypothesis=NAME [run_dir=DIR] [KEY=VALUE...]`: explore a hypothesis's search space,
then confirm the winner on fresh launches (framework.run.search).

Every check (the search block, the grid's workloads, the backend, the sim's coverage of the space, the
confirmation it will register) runs before any server starts: a problem is one line and exit 2. Exit 3 when
the exploration measured nothing it could confirm.
"""

from __future__ import annotations

import sys
from pathlib import Path

from framework.cli.args import kv_pairs
from framework.errors import EXIT_NO_DATA, EXIT_OK, ConfigError
from framework.execution.backends import remote_listen_warning
from framework.run.preflight import output_dir_problem
from framework.run.search import NoWinner, default_run_dir, resolve_search, search

SEARCH_KEYS = ("run_dir",)


def main(args: list[str]) -> int:
    kv = kv_pairs(args)
    overrides = [a for a in args if a.partition("=")[0] not in SEARCH_KEYS]
    cwd = Path.cwd()
    try:
        setup = resolve_search(overrides, cwd)
    except ConfigError as exc:
        if "." in exc.field or "unknown key" not in exc.message:
            raise
        raise ConfigError(exc.file, exc.field, f"{exc.message}; and search's own: {', '.join(SEARCH_KEYS)}") from None
    remote = remote_listen_warning(setup.backend)
    if remote is not None:  # before any server listens
        print(remote, file=sys.stderr)
    run_dir = Path(kv["run_dir"]) if kv.get("run_dir") else default_run_dir(setup.hypothesis, cwd)
    if run_dir.exists():
        raise ConfigError("command line", "run_dir", f"{run_dir} exists; a search writes a new directory")
    problem = output_dir_problem(run_dir)
    if problem:
        raise ConfigError("command line", "run_dir", problem)
    try:
        result = search(setup, run_dir, cwd)
    except NoWinner as exc:
        print(f"error: no data: {exc}", file=sys.stderr)
        return EXIT_NO_DATA
    if result.get("confirmation") is None:  # the search chose its own reference: nothing to confirm (it says so)
        return EXIT_OK
    no_data = ((result["confirmation"].get("analysis") or {}).get("details") or {}).get("no_data")
    return EXIT_NO_DATA if no_data else EXIT_OK
