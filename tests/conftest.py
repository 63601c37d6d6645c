"""Shared fixtures for the top-level tests (helpers live in cli_helpers.py)."""

from pathlib import Path

import pytest


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A scratch working directory: runs write outputs/ and verdicts.jsonl here, as a user's would."""
    return tmp_path
