"""Ledgers written before the redesign (at 08a34bb) still audit: every verdict recomputes.

Only the command line is used (no import from `framework`), so this test holds whatever the
package's layout: it copies tests/fixtures/pre_redesign/ to a temporary directory and runs
`python -m framework audit ledger=...` there, with the repository root on PYTHONPATH.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "pre_redesign"
LEDGERS = ["sim_hypotheses.jsonl", "resumed.jsonl", "anytime.jsonl", "sweep.jsonl"]


def _audit(ledger: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env["COLUMNS"] = "200"
    return subprocess.run([sys.executable, "-m", "framework", "audit", f"ledger={ledger}"], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def fixture_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("pre_redesign") / "pre_redesign"
    shutil.copytree(FIXTURES, dest)
    return dest


@pytest.mark.parametrize("ledger", LEDGERS)
def test_pre_redesign_ledger_audits(fixture_copy: Path, ledger: str) -> None:
    assert (fixture_copy / ledger).is_file()
    result = _audit(ledger, fixture_copy)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "audit passed" in out, out


def test_gpu_results_ledger_audits() -> None:
    result = _audit("docs/results/gpu/verdicts.jsonl", ROOT)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "audit passed" in out, out
