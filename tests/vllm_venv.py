"""Where the vLLM tier finds vLLM (a venv of its own, never imported), and the tiny HF model made in it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from cli_helpers import ROOT

VENV = Path(os.environ.get("FRAMEWORK_VLLM_VENV", Path.home() / ".cache" / "framework" / "vllm-venv"))
PYTHON = VENV / "bin" / "python"
HAS_VLLM = PYTHON.exists() and any((VENV / "lib").glob("python3*/site-packages/vllm/entrypoints/openai/api_server.py"))
# .ci/vllm.sh writes why vLLM's build cannot run on this CPU (it dies with an illegal instruction)
UNUSABLE = VENV / ".framework-unusable"
CANNOT_RUN = UNUSABLE.read_text(encoding="utf-8").strip() if UNUSABLE.is_file() else None


def generate_tiny_hf(path: Path, seed: int = 0) -> dict[str, str]:
    """`python -m framework.assets.tiny_hf PATH --seed S` in the vLLM venv; {file name: sha256}."""
    out = subprocess.run([str(PYTHON), "-m", "framework.assets.tiny_hf", str(path), "--seed", str(seed)],
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return {Path(line.split()[0]).name: line.split()[-1] for line in out.stdout.splitlines()}


# the tier's marks: a test module of the vLLM tier sets `pytestmark = TIER`
TIER = [
    pytest.mark.vllm,
    pytest.mark.skipif(not HAS_VLLM, reason=f"no vLLM venv at {VENV} (run `bash .ci/vllm.sh`, or set "
                                            "FRAMEWORK_VLLM_VENV)"),
    pytest.mark.skipif(CANNOT_RUN is not None, reason=f"{CANNOT_RUN} (.ci/vllm.sh)"),
]

