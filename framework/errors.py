"""Every exception the framework raises on purpose, and the exit codes the CLI maps them to.

    FrameworkError
    ├── UserError                the input is wrong, not the program: one line, exit 2, no traceback
    │   ├── SpecError            a hypothesis or experiment file: file, field, what is allowed
    │   │   └── ConfigError      a command-line or config value (reported the same way)
    │   ├── BackendConfigError   a backend setting that cannot produce a command line: field, message
    │   ├── RegistrationChanged  the hypothesis or its analysis plan changed since it was registered
    │   ├── LedgerError          the ledger cannot be appended to safely (it is left as it was)
    │   ├── StorageError         a run's file cannot be written (a full disk): nothing torn, resume=DIR
    │   ├── TrialsFileError      a trials file damaged in the middle
    │   │   └── TrialsConflict   two rows of it claim the same launch or request with different content
    │   ├── YamlProblem          YAML past the loader's limits or with a duplicate key: where, message
    │   ├── FitError             a pilot with nothing a twin can be fitted to
    │   └── ReportError          a report path that is not a run, a sweep or a ledger
    ├── NoData                   the work ran but measured nothing a verdict can stand on: exit 3
    │   └── NoWinner             a search's exploration found no candidate to confirm
    └── LaunchError              a server did not become ready (the run records it; it never escapes a run)

The CLI (framework.cli.main) maps a UserError to exit 2 and NoData to exit 3, each one line on stderr.
Those that were ValueErrors stay ValueErrors too, for the callers that catch them as such.

The servers we ship (`framework.servers`) are separate programs with their own errors.
"""

from __future__ import annotations

from pathlib import Path

EXIT_OK = 0
EXIT_PROBLEMS = 1    # audit: the ledger has problems
EXIT_BAD_INPUT = 2   # a UserError: nothing started, nothing written
EXIT_NO_DATA = 3     # the run finished but a condition measured nothing: no verdict can be claimed
EXIT_INTERRUPTED = 130


class FrameworkError(Exception):
    """The root: anything raised on purpose by the framework."""


class UserError(FrameworkError):
    """The input (files, command line, ledger state) is wrong, not the program."""


class SpecError(UserError):
    """A problem in a hypothesis or experiment file: which file, which field, what is allowed."""

    def __init__(self, file: str | Path, field: str, message: str) -> None:
        self.file = str(file)
        self.field = field
        self.message = message
        super().__init__(f"{self.file}: {field}: {message}" if field else f"{self.file}: {message}")


class ConfigError(SpecError):
    """A bad command-line or config value (reported like a spec error: file/field/what is allowed)."""


class BackendConfigError(UserError, ValueError):
    """A backend setting that cannot produce a command line: (field, message)."""

    def __init__(self, field_name: str, message: str) -> None:
        self.field = field_name
        self.message = message
        super().__init__(f"{field_name}: {message}")


class RegistrationChanged(UserError):
    """The hypothesis (or its analysis plan) changed since it was registered."""


class LedgerError(UserError):
    """The ledger cannot be appended to safely (torn last line, or it disagrees with its head file)."""


class StorageError(UserError):
    """A run's own file (trials, verdict, run directory) cannot be written: a full disk, a quota, a read-only
    filesystem. What was written is whole (a failed line is cut back), and the message names `resume=DIR`."""


class TrialsFileError(UserError, ValueError):
    """A line in the middle of a trials file is not JSON: the file was damaged or edited."""


class TrialsConflict(TrialsFileError):
    """Two rows of a trials file claim the same launch or request with different content (framework.analysis.rows)."""


class YamlProblem(UserError, ValueError):
    """(where, message): `where` is "line L, column C" or "yaml" (framework.core.yamlio; a file's loader turns it
    into a SpecError naming the file)."""

    def __init__(self, where: str, message: str) -> None:
        self.where, self.message = where, message
        super().__init__(f"{where}: {message}")


class FitError(UserError, ValueError):
    """Nothing in the pilot can be fitted (no measured launch, no decode, ...): the message says why
    (framework.analysis.twinfit)."""


class ReportError(UserError):
    """The path is not a run directory, a multirun directory or a ledger."""


class NoData(FrameworkError):
    """The work ran but measured nothing a verdict can stand on (exit 3)."""


class NoWinner(NoData):
    """A search's exploration measured no candidate that could be confirmed (framework.run.search)."""


class LaunchError(FrameworkError):
    """The server did not become ready: why, its exit code (if it exited), and its last log lines."""

    def __init__(self, message: str, exit_code: int | None = None, log_tail: list[str] | None = None,
                 timed_out: bool = False) -> None:
        self.message = message
        self.exit_code = exit_code
        self.log_tail = log_tail or []
        self.timed_out = timed_out
        super().__init__(message)
