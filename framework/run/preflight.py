"""Checks of a resolved run config that must pass before any server starts or anything is written.

Pure functions over plain data (the `backend` group as a dict, the loaded hypothesis and
experiment); each problem is a `ConfigError`/`SpecError` naming the field and what is allowed,
so `validate`, `precheck` and the run report it as one line with exit code 2.
"""

from __future__ import annotations

import math
import os
import shutil
import string
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import ValidationError

from framework.core import design, outputs
from framework.core.spec import Design, Experiment, Hypothesis, Workload
from framework.core.workload import size_problem
from framework.errors import SpecError
from framework.execution.backends import BackendSettings, is_loopback, probe_values, template
from framework.execution.client import resolve_plan
from framework.run.redaction import MIN_LENGTH, is_secret_name, looks_secret

MISSING = "???"
MAX_ARG_CHARS = 131_072  # Linux's MAX_ARG_STRLEN: exec refuses a longer argument
FINITE = ("ready_timeout_s", "settle_timeout_s", "speedup", "noise_scale")  # a wait must end, a clock must tick


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
    if backend.python is not None:
        problem = executable_problem(backend.python)
        if problem:
            raise SpecError(source, "backend.python", problem)
    for name, value in backend.env.items():
        problem = env_problem(str(name), str(value))
        if problem:
            raise SpecError(source, "backend.env", problem)
    for key in FINITE:
        if not math.isfinite(getattr(backend, key)):
            raise SpecError(source, f"backend.{key}", f"must be a finite number (got {getattr(backend, key)!r})")
    problem = argv_problem(backend)
    if problem:
        raise SpecError(source, *problem)
    if backend.name != "endpoint" and not is_loopback(backend.host) and not backend.allow_remote:
        raise SpecError(source, "backend.host", f"{backend.host} is not a loopback address: every server would "
                                                "listen where other machines can reach it; add "
                                                "backend.allow_remote=true to allow it, or keep 127.0.0.1")
    if backend.api_key is not None and len(backend.api_key) < MIN_LENGTH:
        raise SpecError(source, "backend.api_key", f"at least {MIN_LENGTH} characters: a shorter key could not be "
                                                   f"told apart from other text when it is redacted")
    if backend.name == "endpoint":
        if not backend.url:
            raise SpecError(source, "backend.url", "the endpoint backend needs backend.url=http://HOST:PORT")
        parts = urlsplit(backend.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise SpecError(source, "backend.url",
                            f"must be http://HOST:PORT or https://HOST:PORT (got {backend.url!r})")
        try:
            _ = parts.port  # urlsplit checks the port's range only when asked
        except ValueError:
            raise SpecError(source, "backend.url", f"the port must be 0-65535 (got {backend.url!r})") from None
    return backend


def argv_problem(backend: BackendSettings) -> tuple[str, str] | None:
    """(field, why) when the backend's command line could not be executed as written, else None.

    Its placeholders take no format spec or conversion (`{port:>300000000}` would build a 300 MB argument),
    no argument may exceed what exec accepts, and its program (argv[0], with `{python}`, `{module}` and
    `{binary}` filled in) must exist: otherwise the launch fails after the registration is written.
    """
    if not backend.table.starts_server:
        return None
    argv = template(backend)
    field = "backend.argv" if backend.argv is not None else "backend"
    for arg in argv:
        if len(arg) > MAX_ARG_CHARS:
            return field, f"an argument of {len(arg):,} characters; at most {MAX_ARG_CHARS:,}"
        try:
            parts = list(string.Formatter().parse(arg))
        except ValueError:
            return None  # the backend table's own check names it (framework.execution.backends.check)
        for _, name, spec, conversion in parts:
            if name is not None and (spec or conversion):
                return field, (f"{arg!r}: a placeholder is replaced as it is, without a format spec or "
                               f"conversion; write {{{name}}}")
    if not argv:
        return None
    program = argv[0]
    try:
        program = program.format(**probe_values(backend))
    except (KeyError, IndexError, ValueError):
        return None  # a launch-specific placeholder in argv[0]: nothing to look up before the launch
    problem = executable_problem(program)
    if problem:
        where = "backend.binary" if argv[0] == "{binary}" else "backend.python" if argv[0] == "{python}" else field
        return where, f"the server's program: {problem}"
    return None


def backend_fits(backend: BackendSettings, h: Hypothesis, source: str = "command line") -> None:
    """The endpoint backend measures one running server: one condition only."""
    n = len(design.conditions(h))
    if backend.name == "endpoint" and n > 1:
        raise SpecError(source, "backend", f"the endpoint backend measures one running server, but {h.name} has "
                                           f"{n} conditions; use backend=sim or backend=sglang")


def level_problems(h: Hypothesis, exp: Experiment) -> list[tuple[str, str]]:
    """(field, message) for every level setting that would fail only once a server starts.

    Each level's workload merged over the experiment's and each condition's resolved workload
    (types and ranges), env names and values, and `python:` interpreters.
    """
    problems: list[tuple[str, str]] = []
    base = exp.workload.model_dump()
    for fname, factor in h.factors.items():
        for lname, level in factor.levels.items():
            at = f"factors.{fname}.levels.{lname}"
            try:
                Workload.model_validate({**base, **level.workload})
            except ValidationError as exc:
                problems.append(pydantic_problem(exc, f"{at}.workload"))
            for name, value in level.env.items():
                problem = env_problem(name, value)
                if problem:
                    problems.append((f"{at}.env", problem))
                elif (is_secret_name(name) or looks_secret(value)) and len(value) >= MIN_LENGTH:
                    problems.append((f"{at}.env.{name}", "looks like a secret, and a hypothesis file is stored "
                                     "verbatim in the ledger: export it in the shell (servers inherit the "
                                     f"environment) or pass +backend.env.{name}=... on the command line"))
            if level.python is not None:
                problem = executable_problem(level.python)
                if problem:
                    problems.append((f"{at}.python", problem))
    if not problems:
        for cond in design.conditions(h):
            try:
                design.workload_for(h, exp, cond)
            except ValidationError as exc:
                field, msg = pydantic_problem(exc, "workload")
                problems.append((field, f"{msg} in condition {cond.label()}"))
    return problems


MIN_FREE_BYTES = 1 << 20  # a run directory's file system needs room for .hydra/ and the first trials


def output_dir_problem(path: Path) -> str | None:
    """Why Hydra could not make a run (or sweep) directory at `path`, or None: its nearest existing
    ancestor must be a writable directory with some space left (Hydra's own error is a traceback)."""
    base = path
    while not base.exists() and base != base.parent:
        base = base.parent
    if not base.is_dir():
        return f"cannot make {path}: {base} is not a directory"
    if not os.access(base, os.W_OK | os.X_OK):
        return f"cannot make {path}: {base} is not writable"
    try:
        free = shutil.disk_usage(base).free
    except OSError as exc:
        return f"cannot make {path}: {exc.strerror or exc}"
    if free < MIN_FREE_BYTES:
        return f"cannot make {path}: the file system of {base} is full ({free:,} bytes free)"
    return None


def env_problem(name: str, value: str) -> str | None:
    if not name or "=" in name or "\0" in name:
        return f"environment variable name {name!r}: must be non-empty, without '=' or NUL"
    if "\0" in value:
        return f"the value of {name} contains a NUL character"
    return None


def executable_problem(python: str) -> str | None:
    """Why `python` (a path, or a command looked up in PATH) cannot be executed, or None."""
    if os.sep not in python:
        return None if shutil.which(python) else f"{python!r} is not a command on PATH"
    path = Path(python).expanduser()
    if not path.exists():
        return f"{python} does not exist"
    if path.is_dir():
        return f"{python} is a directory; give the interpreter, e.g. {path / 'bin' / 'python'}"
    if not os.access(path, os.X_OK):
        return f"{python} is not executable"
    return None


def size_problems(h: Hypothesis, exp: Experiment, d: Design) -> list[tuple[str, str]]:
    """(field, why) for every condition whose launch plan would not fit in memory under design `d`."""
    problems = []
    for cond in design.conditions(h):
        problem = size_problem(design.workload_for(h, exp, cond), d.requests, d.warmup)
        if problem:
            problems.append(("workload", f"{problem} in condition {cond.label()}"))
    return problems


def check_pair(h: Hypothesis, h_path: str | Path, exp: Experiment) -> None:
    """Raise SpecError (in the hypothesis file) for the first level problem."""
    problems = level_problems(h, exp)
    if problems:
        raise SpecError(h_path, *problems[0])
    pairing = outputs.pairing_problem(h, exp)  # an outputs prediction needs the same prompts in both conditions
    if pairing is not None:
        raise SpecError(h_path, *pairing)
    for cond in design.conditions(h):  # a dataset must be readable: the run would fail at its first launch
        w = design.workload_for(h, exp, cond)
        if w.dataset is not None:
            try:
                resolve_plan(w, requests_n=1, warmup=0, seed=0, base_dir=Path(h_path).parent)
            except ValueError as exc:
                raise SpecError(h_path, f"workload of {cond.label()}.dataset.path", str(exc)) from None
