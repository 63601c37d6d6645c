"""What every server we ship is started with, under SGLang's names, and how /get_server_info shows it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class SglangLaunchArgs(BaseModel):
    """What every server we ship is started with, under SGLang's names (the sim's and the GPU server's args
    extend it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model_path: str
    tokenizer_path: str | None = None
    tp_size: int = Field(1, ge=1)
    host: str = "127.0.0.1"
    port: int = Field(30000, ge=0, le=65535)


def resolved_server_args(args: SglangLaunchArgs, seed: int) -> dict:
    """SGLang's full ServerArgs as this launch resolved it (the seed drawn when none was given)."""
    fields = dict(args.server_args)
    fields["random_seed"] = seed
    for secret in ("api_key", "admin_api_key"):
        if fields.get(secret):
            fields[secret] = "***"
    return fields
