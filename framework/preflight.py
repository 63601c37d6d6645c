"""Checks of a resolved run config that must pass before any server starts or anything is written.

Pure functions over plain data (the `backend` group as a dict, the loaded hypothesis and
experiment); each problem is a `ConfigError`/`SpecError` naming the field and what is allowed,
so `validate`, `precheck` and the run report it as one line with exit code 2.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from pydantic import ValidationError

from framework.execution.backends import BackendSettings
from framework.redaction import MIN_LENGTH
from framework.spec import SpecError

MISSING = "???"


def pydantic_problem(exc: ValidationError, prefix: str) -> tuple[str, str]:
    """(field path, message with the limit) of a pydantic error's first problem, without its doc URL."""
    err = exc.errors()[0]
    field = prefix + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"])
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        msg = "unknown field"
    elif "input" in err and not isinstance(err["input"], (dict, list)):
        msg += f" (got {err['input']!r})"
    return field, msg


def backend_settings(raw: dict[str, Any], source: str = "command line") -> BackendSettings:
    """The `backend` group, checked: required values present, types and limits, an endpoint's URL."""
    for key, value in raw.items():
        if value == MISSING:
            hint = " (e.g. backend.url=http://127.0.0.1:30000)" if key == "url" else ""
            raise SpecError(source, f"backend.{key}", f"missing: the {raw.get('name')} backend needs it{hint}")
    try:
        backend = BackendSettings.model_validate(raw)
    except ValidationError as exc:
        raise SpecError(source, *pydantic_problem(exc, "backend")) from None
    if backend.api_key is not None and len(backend.api_key) < MIN_LENGTH:
        raise SpecError(source, "backend.api_key", f"at least {MIN_LENGTH} characters: a shorter key could not be "
                                                   f"told apart from other text when it is redacted")
    if backend.name == "endpoint":
        if not backend.url:
            raise SpecError(source, "backend.url", "the endpoint backend needs backend.url=http://HOST:PORT")
        parts = urlsplit(backend.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise SpecError(source, "backend.url", f"must be http://HOST:PORT or https://HOST:PORT (got {backend.url!r})")
        try:
            parts.port
        except ValueError:
            raise SpecError(source, "backend.url", f"the port must be 0-65535 (got {backend.url!r})") from None
    return backend
