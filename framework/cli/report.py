"""`python -m framework report PATH`: Markdown and HTML of a run directory, a multirun directory, a search directory
or a ledger."""

from __future__ import annotations

from pathlib import Path

from framework.errors import EXIT_OK, ConfigError
from framework.present.report import write_report
from framework.present.search_report import write_search_report


def main(args: list[str]) -> int:
    if len(args) != 1:
        raise ConfigError("command line", "report", "give one path: a run directory, a multirun directory or a ledger")
    path = Path(args[0])
    search_dir = (path / "search.json").is_file() and not (path / "verdict.json").is_file()  # framework.run.search's
    written = (write_search_report if search_dir else write_report)(path)  # a ReportError: one line, exit 2
    print(f"report: {written[1]}")
    print(f"        {written[0]}")
    return EXIT_OK
