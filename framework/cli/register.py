"""`python -m framework register hypothesis=NAME [ledger=PATH]`: pre-register a hypothesis before any data."""

from __future__ import annotations

from pathlib import Path

from framework.errors import EXIT_OK
from framework.records.registration import analysis_settings, check_or_amend
from framework.run.resolve import precheck_one


def main(args: list[str]) -> int:
    cfg, r = precheck_one(args, "register")
    reg_hash, amended = check_or_amend(Path(cfg.ledger), r.hypothesis_path, analysis_settings(r.design),
                                       bool(cfg.allow_amend))
    print(f"{r.hypothesis.name}: {'amended' if amended else 'registered'} in {cfg.ledger} ({reg_hash[:16]})")
    return EXIT_OK
