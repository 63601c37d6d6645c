"""`python -m framework run KEY=VALUE...`: a hypothesis as a Hydra run (or a sweep with -m)."""

from __future__ import annotations

from framework.run.app import run_command


def main(args: list[str]) -> int:
    return run_command(args)
