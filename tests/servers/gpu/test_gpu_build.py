"""The GPU server's build facts: the compile cache's autotune digest tells two builds apart (pure part, no torch)."""

from __future__ import annotations

from pathlib import Path

from framework.servers.gpu.build import after_warmup, cache_digest


def test_the_digest_changes_with_the_chosen_configs_and_not_with_other_files(tmp_path: Path) -> None:
    assert cache_digest(None)["best_configs"] == 0
    assert cache_digest(tmp_path) == {"best_configs": 0, "sha256": None}
    (tmp_path / "ab").mkdir()
    (tmp_path / "ab" / "k1.best_config").write_text('{"XBLOCK": 64, "num_warps": 4}')
    (tmp_path / "ab" / "k1.py").write_text("generated kernel")
    first = cache_digest(tmp_path)
    assert first["best_configs"] == 1 and first["sha256"]
    (tmp_path / "ab" / "k1.py").write_text("another generated kernel")
    assert cache_digest(tmp_path) == first  # only the choices count
    (tmp_path / "ab" / "k1.best_config").write_text('{"XBLOCK": 128, "num_warps": 8}')
    assert cache_digest(tmp_path)["sha256"] != first["sha256"]


def test_a_server_without_the_fused_path_records_no_compile_choice() -> None:
    class Ex:
        fused = None

    assert after_warmup(Ex()) == {"batch1_gemv": None, "compile_cache": None}
    assert after_warmup(None) == {"batch1_gemv": None, "compile_cache": None}
