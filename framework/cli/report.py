"""`python -m framework report PATH`: Markdown and HTML of a run directory, a multirun directory or a ledger."""

from __future__ import annotations

from framework.errors import EXIT_OK, ConfigError
from framework.present.report import write_report


def main(args: list[str]) -> int:
    if len(args) != 1:
        raise ConfigError("command line", "report", "give one path: a run directory, a multirun directory or a ledger")
    written = write_report(args[0])  # a ReportError is a UserError: one line, exit 2
    print(f"report: {written[1]}")
    print(f"        {written[0]}")
    return EXIT_OK
