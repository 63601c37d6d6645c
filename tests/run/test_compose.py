"""Composing the run config: a chosen backend's own settings are the ones checked and listed."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from framework.errors import ConfigError
from framework.execution.backends import BackendSettings
from framework.run.compose import compose


def test_the_endpoint_backend_takes_a_protocol() -> None:
    cfg = compose(["hypothesis=eagle3_allreduce", "backend=endpoint", "backend.url=http://127.0.0.1:9",
                   "backend.protocol=openai"])
    settings = BackendSettings(**OmegaConf.to_container(cfg.backend, resolve=True))
    assert settings.effective_protocol == "openai"
    default = compose(["hypothesis=eagle3_allreduce", "backend=endpoint", "backend.url=http://127.0.0.1:9"])
    assert BackendSettings(**OmegaConf.to_container(default.backend, resolve=True)).effective_protocol == "sglang"


def test_a_misspelt_key_lists_the_chosen_backends_settings_not_the_defaults() -> None:
    with pytest.raises(ConfigError) as exc:
        compose(["hypothesis=eagle3_allreduce", "backend=endpoint", "backend.url=http://127.0.0.1:9",
                 "backend.speedup=2"])
    message = str(exc.value)
    assert "backend.speedup: unknown key; allowed in backend: api_key, name, protocol, ready_timeout_s, url" in message


def test_the_typical_estimand_under_anytime_from_the_command_line_is_refused_before_anything_starts(tmp_path):
    from framework.run.resolve import resolve_config

    text = (Path(__file__).resolve().parents[2] / "hypotheses" / "eagle3_allreduce.yaml").read_text()
    typical = text.replace("    kind: increase\n", "    kind: increase\n    estimand: typical\n", 1)
    (tmp_path / "typ.yaml").write_text(typical)
    cfg = compose(["hypothesis=typ", f"paths.hypotheses={tmp_path}", "design.analysis=anytime"])
    with pytest.raises(ConfigError, match="no anytime-valid test") as exc:
        resolve_config(cfg)
    assert exc.value.field == "design.analysis"
