"""When two recomputed figures are the same figure: audit's tolerance, and the walk that applies it to a tree.

A verdict recomputed on another CPU (OpenBLAS picks other kernels with AVX-512) or with a newer numpy/scipy
differs in the 15th-16th significant digit, so "unchanged" means equal within a relative 1e-9, never equal
digit for digit. Text, booleans, key order and the shape of a record must still match exactly, and NaN
matches only NaN.
"""

from __future__ import annotations

import math
from typing import Any

REL_TOL = 1e-9
ABS_TOL = 1e-300  # only so that exact zeros compare equal


def close(a: Any, b: Any) -> bool:
    """Two scalars as audit compares them: numbers within REL_TOL (NaN only with NaN), anything else equal."""
    if a is None or b is None:
        return a is None and b is None
    try:
        fa, fb = float(a), float(b)
    except (TypeError, ValueError):
        return bool(a == b)
    if math.isnan(fa) or math.isnan(fb):
        return math.isnan(fa) and math.isnan(fb)
    return math.isclose(fa, fb, rel_tol=REL_TOL, abs_tol=ABS_TOL)


def close_list(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b, strict=False))


def first_difference(got: Any, want: Any, path: str = "") -> str | None:
    """Where two JSON-like trees differ beyond the tolerance (keys in the same order), or None when they do not."""
    where = path or "the top"
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return f"{where}: {type(got).__name__}, not an object"
        if list(got) != list(want):
            return f"{where}: keys {list(got)} != {list(want)}"
        for key in want:
            found = first_difference(got[key], want[key], f"{path}.{key}" if path else str(key))
            if found:
                return found
        return None
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return f"{where}: {got!r} != {want!r}"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            found = first_difference(g, w, f"{path}[{i}]")
            if found:
                return found
        return None
    if type(got) is not type(want) and not (isinstance(got, (int, float)) and isinstance(want, (int, float))
                                             and not isinstance(got, bool) and not isinstance(want, bool)):
        return f"{where}: {got!r} ({type(got).__name__}) != {want!r} ({type(want).__name__})"
    if close(got, want):
        return None
    numbers = isinstance(want, (int, float)) and not isinstance(want, bool)
    return f"{where}: {got!r} != {want!r}" + (f" (beyond a relative {REL_TOL:g})" if numbers else "")
