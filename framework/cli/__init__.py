"""`python -m framework COMMAND ...`: one module per command under `framework.cli`, each with `main(args) -> int`.

Nothing imports this package. Each command module is imported only when it runs, so `--help` and a
bad command answer at once. A `UserError` (framework.errors) is one line on stderr and exit 2; Ctrl-C
and SIGTERM/SIGHUP say where to resume.
"""

from __future__ import annotations

import importlib
import signal
import sys

from framework.errors import EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_NO_DATA, EXIT_OK, NoData, UserError

USAGE = """\
usage: python -m framework COMMAND [ARGS]

Hypothesis-driven experiments for LLM serving: declare predictions, run the SGLang
configurations (simulated by default), get an auditable verdict.

commands:
  run KEY=VALUE...         run a hypothesis (Hydra app): hypothesis=NAME [backend=sim|sglang|endpoint]
                           [design.launches=N] [ledger=PATH] [resume=RUN_DIR]; -m for a multirun sweep
  validate [FILE...]       check every hypothesis and experiment file (exit 2 on problems)
  plan hypothesis=NAME     launches per condition for power 0.9 and the expected wall time
                           [pilot=RUN_DIR] [power=0.9]
  search hypothesis=NAME   explore the hypothesis's search: space (Optuna, launch by launch), then confirm the
                           winner on fresh launches under a registered hypothesis [run_dir=DIR] [ledger=PATH]
  bisect hypothesis=NAME   find the version (commit, package or stack level) between a good and a bad one
                           that changed the metric, under the registered alpha [run_dir=DIR] [ledger=PATH]
  fit pilot=RUN_DIR...     fit a twin (the sim's model) to pilot runs of any backend [out=PATH]; serve it
                           with backend=sim sim_profile=PATH
  register hypothesis=NAME pre-register a hypothesis in the ledger before any data [ledger=PATH]
  audit [ledger=PATH] [expect_head=SHA|HEAD_FILE]
                           verify the hash chain, trials hashes, every verdict and its backend/host
  audit history hypothesis=NAME [ledger=PATH]
                           a hypothesis's verdicts over time and what changed between them
  report PATH              Markdown + HTML report of a run directory, a multirun directory or a ledger
  schema                   JSON Schema of every record kind

examples:
  python -m framework run hypothesis=eagle3_allreduce
  python -m framework run -m hypothesis=eagle3_allreduce,torch_symm_mem
  python -m framework run hypothesis=eagle3_allreduce backend=sglang
"""

COMMANDS: dict[str, str] = {  # command -> module under framework.cli
    "run": "run", "validate": "validate", "plan": "plan", "register": "register",
    "audit": "audit", "report": "report", "schema": "schema", "search": "search", "fit": "fit",
    "bisect": "bisect",
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE, end="")
        return EXIT_OK
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"error: unknown command {command!r}; commands: {', '.join(COMMANDS)}", file=sys.stderr)
        print(USAGE, end="", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        code = importlib.import_module(f"framework.cli.{COMMANDS[command]}").main(rest)
        _reraise_swallowed_signal()
        return code
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except NoData as exc:
        print(f"error: no data: {exc}", file=sys.stderr)
        return EXIT_NO_DATA
    except KeyboardInterrupt:
        print(f"interrupted{_resume_hint()}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except SystemExit as exc:
        names = {128 + signal.SIGTERM: "SIGTERM", 128 + signal.SIGHUP: "SIGHUP"}
        if exc.code in names:  # the launcher turns these signals into SystemExit so servers are stopped
            print(f"terminated by {names[exc.code]}{_resume_hint()}", file=sys.stderr)
        raise


def _reraise_swallowed_signal() -> None:
    """A command that ended normally although a stop signal arrived (its exception was swallowed on the
    way, in a finalizer say) still ends as stopped: the exit code and the resume line say so."""
    launcher = sys.modules.get("framework.execution.launcher")
    if launcher is not None:
        launcher.raise_if_signalled()


def _resume_hint() -> str:
    """`resume=DIR` with the directory of the run (or sweep) that was stopped, when one had started."""
    outcomes = sys.modules.get("framework.run.outcomes")
    where = outcomes.OUTCOMES.resume_dir if outcomes is not None else ""
    return f": servers stopped; resume with resume={where}" if where else ""
