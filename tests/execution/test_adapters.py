"""Every backend row's adapter provides every function of the declared protocol, with its parameters."""

from __future__ import annotations

import inspect

import pytest
import yaml
from cli_helpers import ROOT

from framework.execution.adapters import ModelAdapter, load
from framework.execution.backends import BACKENDS

PROTOCOL = {n: f for n, f in vars(ModelAdapter).items() if inspect.isfunction(f) and not n.startswith("_")}


@pytest.mark.parametrize("name", sorted({row.adapter for row in BACKENDS.values() if row.adapter}))
def test_an_adapter_module_is_a_model_adapter(name: str) -> None:
    module = load(name)
    for fn, declared in PROTOCOL.items():
        got = getattr(module, fn, None)
        assert callable(got), f"{name} lacks {fn}"
        want = [p.name for p in inspect.signature(declared).parameters.values()][1:]  # less self
        assert [p.name for p in inspect.signature(got).parameters.values()] == want, fn


def test_the_sim_names_the_engine_of_a_twin_profile(tmp_path) -> None:
    sim = load(BACKENDS["sim"].adapter)
    twin = tmp_path / "twin.yaml"
    shipped = yaml.safe_load((ROOT / "docs" / "results" / "twin" / "llamacpp" / "twin.yaml").read_text())
    twin.write_text(yaml.safe_dump({**shipped, "engine": "vllm"}))
    own = tmp_path / "own.yaml"
    own.write_text(yaml.safe_dump({**shipped, "engine": "sglang"}))
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1,\n")
    assert sim.profile_engine(twin) == "vllm" and sim.profile_engine(own) is None
    with pytest.raises(ValueError, match="invalid YAML"):
        sim.profile_engine(bad)
    nan = tmp_path / "nan.yaml"  # issue 31: a twin's values are bounded before any server starts
    nan.write_text(yaml.safe_dump({**shipped, "noise": {**shipped["noise"], "tpot_s": {
        **shipped["noise"]["tpot_s"], "request_log_sd": float("nan")}}}))
    with pytest.raises(ValueError, match=r"^noise.tpot_s.request_log_sd must be a finite number in \[0, 3\]"):
        sim.profile_engine(nan)


def test_loopback_addresses_are_told_from_the_rest() -> None:
    from framework.execution.backends import BackendSettings, is_loopback, remote_listen_warning

    assert all(map(is_loopback, ["127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost", "LOCALHOST"]))
    assert not any(map(is_loopback, ["0.0.0.0", "::", "192.0.2.7", "example.org", ""]))
    assert remote_listen_warning(BackendSettings(name="sim")) is None
    assert remote_listen_warning(BackendSettings(name="endpoint", url="http://192.0.2.7:1")) is None  # starts nothing
    assert "backend.host=0.0.0.0" in (remote_listen_warning(BackendSettings(name="sim", host="0.0.0.0")) or "")
