"""SHA-256 of a file's bytes: how the records name the files they rest on.

The hypothesis, the dataset, the trials file and the model are each recorded
with this hash. It lives here, not in framework.records, so that any layer can
hash a file: the HTTP client records its dataset's sha256 and must not import
the records layer (execution and records are sibling layers).
"""

from __future__ import annotations

import hashlib
from pathlib import Path


def sha256_file(path: str | Path) -> str:
    """The hex SHA-256 of the file's bytes, read 1 MiB at a time."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
