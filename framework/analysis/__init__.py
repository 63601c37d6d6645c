"""The analysis of a run: trial rows -> per-launch values -> per-prediction decisions -> a verdict.

`analyze` and `Analysis` are the package's public face (`framework.analysis.verdicts`, which also
holds `sequential_look`); `framework.analysis.planning` plans how many launches a design needs.
Both names load lazily, on first use, so that importing the package (or `planning`, which imports
`analyze` only inside a function) does not load the statistics.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from framework.analysis.verdicts import Analysis, analyze

__all__ = ["Analysis", "analyze"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from framework.analysis import verdicts

        return getattr(verdicts, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
