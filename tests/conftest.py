"""Shared fixtures for every test, in any folder (helpers live in cli_helpers.py).

Property tests are derandomized: Hypothesis draws its examples from a seed fixed by each test's
source, keeps no example database, and has no per-example deadline, so a run gives the same
examples on every machine and under any load. A counterexample a test once found is pinned in
the test with ``@example``. To search wider on purpose: ``HYPOTHESIS_PROFILE=explore pytest``.
"""

import os
from pathlib import Path

import pytest
from hypothesis import settings

settings.register_profile("repo", derandomize=True, database=None, deadline=None, print_blob=True)
settings.register_profile("explore", derandomize=False, database=None, deadline=None, max_examples=2000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repo"))


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A scratch working directory: runs write outputs/ and verdicts.jsonl here, as a user's would."""
    return tmp_path


@pytest.fixture(scope="module")
def tiny_hf(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """The vLLM tier's seed-0 tiny HF model, made once per module in the vLLM venv: (folder, {file: sha256})."""
    from vllm_venv import generate_tiny_hf

    path = tmp_path_factory.mktemp("model") / "tiny-hf"
    return path, generate_tiny_hf(path)
