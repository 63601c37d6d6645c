"""SHA-256 of a file's bytes: how the records name the files they rest on.

The hypothesis, the dataset, the trials file and the model are each recorded
with this hash. It lives here, not in framework.records, so that any layer can
hash a file: the HTTP client records its dataset's sha256 and must not import
the records layer (execution and records are sibling layers).
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Any


def sha256_file(path: str | Path) -> str:
    """The hex SHA-256 of the file's bytes, read 1 MiB at a time."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def json_finite(obj: Any) -> Any:
    """JSON has no NaN/inf; store them as null so every reader parses the line and hashes agree."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): json_finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_finite(v) for v in obj]
    return obj
