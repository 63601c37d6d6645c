"""`python -m framework COMMAND ...`: a thin dispatcher to one `cmd_*` function per subcommand."""

from __future__ import annotations

import sys
from typing import Callable

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
  register hypothesis=NAME pre-register a hypothesis in the ledger before any data [ledger=PATH]
  audit [ledger=PATH]      verify the ledger's hash chain, trials hashes and recompute every verdict
  audit history hypothesis=NAME [ledger=PATH]
                           a hypothesis's verdicts over time and what changed between them
  report PATH              Markdown + HTML report of a run directory, a multirun directory or a ledger
  schema                   JSON Schema of every record kind

examples:
  python -m framework run hypothesis=eagle3_allreduce
  python -m framework run -m hypothesis=eagle3_allreduce,torch_symm_mem
  python -m framework run hypothesis=eagle3_allreduce backend=sglang
"""


def _kv(args: list[str]) -> dict[str, str]:
    """KEY=VALUE arguments of the non-Hydra subcommands."""
    from framework.run.runner import ConfigError

    out = {}
    for arg in args:
        key, sep, value = arg.partition("=")
        if not sep or not key:
            raise ConfigError("command line", arg, "expected KEY=VALUE")
        out[key] = value
    return out


def cmd_run(args: list[str]) -> int:
    from framework.run.app import EXIT_NO_DATA, NO_DATA_RUNS, hydra_run, precheck

    import os

    from framework.run.redaction import secret_overrides

    args, hidden = secret_overrides(args)  # secret values reach Hydra as ${oc.env:...}, never its files
    os.environ.update(hidden)
    if not any(a in ("--help", "-h", "--hydra-help", "--cfg", "-c", "--info", "-i") or a.startswith("--cfg")
               for a in args):
        precheck(args)
    sys.argv = ["python -m framework run", *args]
    hydra_run()
    from framework.run.sweep import NO_DATA_JOBS  # jobs of a joblib or SLURM sweep ran in other processes

    return EXIT_NO_DATA if NO_DATA_RUNS or NO_DATA_JOBS else 0


def cmd_validate(args: list[str]) -> int:
    from framework.cli.validate import validate_all

    return validate_all(args)


def cmd_plan(args: list[str]) -> int:
    from framework.cli.plan import plan_command

    return plan_command(args)


def cmd_register(args: list[str]) -> int:
    from framework.run.app import compose, precheck
    from framework.records.registration import check_or_amend
    from framework.run.runner import analysis_settings, effective_design, load_pair
    from omegaconf import OmegaConf
    from pathlib import Path

    precheck(args)
    cfg = compose(args)
    h, h_path, _ = load_pair(cfg)
    d = effective_design(h.design, OmegaConf.to_container(cfg.design, resolve=True), h)  # type: ignore[arg-type]
    reg_hash, amended = check_or_amend(Path(cfg.ledger), h_path, analysis_settings(d), bool(cfg.allow_amend))
    print(f"{h.name}: {'amended' if amended else 'registered'} in {cfg.ledger} ({reg_hash[:16]})")
    return 0


def cmd_audit(args: list[str]) -> int:
    from framework.records import audit

    if args and args[0] == "history":
        kv = _kv(args[1:])
        if "hypothesis" not in kv:
            from framework.run.runner import ConfigError

            raise ConfigError("command line", "hypothesis", "audit history needs hypothesis=NAME")
        return audit.cmd_history(kv.get("ledger", "verdicts.jsonl"), kv["hypothesis"])
    kv = _kv(args)
    return audit.cmd_audit(kv.get("ledger", "verdicts.jsonl"))


def cmd_report(args: list[str]) -> int:
    from framework.present.report import cmd_report as report

    if len(args) != 1:
        from framework.run.runner import ConfigError

        raise ConfigError("command line", "report", "give one path: a run directory, a multirun directory or a ledger")
    return report(args[0])


def cmd_schema(args: list[str]) -> int:
    from framework.cli.schema import cmd_schema as schema

    return schema()


COMMANDS: dict[str, Callable[[list[str]], int]] = {
    "run": cmd_run, "validate": cmd_validate, "plan": cmd_plan, "register": cmd_register,
    "audit": cmd_audit, "report": cmd_report, "schema": cmd_schema,
}


def main(argv: list[str] | None = None) -> int:

    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE, end="")
        return 0
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"error: unknown command {command!r}; commands: {', '.join(COMMANDS)}", file=sys.stderr)
        print(USAGE, end="", file=sys.stderr)
        return 2
    try:
        return COMMANDS[command](rest)
    except Exception as exc:
        from framework.run.app import report_error, user_errors

        if isinstance(exc, user_errors()):
            return report_error(exc)
        raise
    except KeyboardInterrupt:
        print(f"interrupted{_resume_hint()}", file=sys.stderr)
        return 130
    except SystemExit as exc:
        import signal

        names = {128 + signal.SIGTERM: "SIGTERM", 128 + signal.SIGHUP: "SIGHUP"}
        if exc.code in names:  # the launcher turns these signals into SystemExit so servers are stopped
            print(f"terminated by {names[exc.code]}{_resume_hint()}", file=sys.stderr)
        raise


def _resume_hint() -> str:
    """`resume=DIR` with the directory of the run (or sweep) that was stopped, when one had started."""
    app = sys.modules.get("framework.run.app")
    where = getattr(app, "RESUME_HINT", [""])[0] if app else ""
    return f": servers stopped; resume with resume={where}" if where else ""

