"""The KEY=VALUE arguments of the commands that are not Hydra apps (plan, register, audit)."""

from __future__ import annotations

from framework.errors import ConfigError


def kv_pairs(args: list[str]) -> dict[str, str]:
    out = {}
    for arg in args:
        key, sep, value = arg.partition("=")
        if not sep or not key:
            raise ConfigError("command line", arg, "expected KEY=VALUE")
        out[key] = value
    return out
