"""`schema` prints a JSON Schema for every record kind, with the ledger's field names."""

from __future__ import annotations

import json

import pytest

from framework.cli.schema import main as cmd_schema


def test_schema_covers_every_record_kind(capsys: pytest.CaptureFixture[str]) -> None:
    assert cmd_schema([]) == 0
    kinds = json.loads(capsys.readouterr().out)["kinds"]
    assert set(kinds) == {
        "verdict", "registration", "amendment", "exploration", "bisect", "trial.launch", "trial.request",
        "trial.workload",
    }
    verdict = kinds["verdict"]["properties"]
    assert verdict["schema"]["const"] == "framework.verdict/1"
    for key in ("hypothesis", "backend", "verdict", "predictions", "conditions", "trials", "environment",
                "config", "started", "finished", "prev_hash", "hash"):
        assert key in verdict
    assert kinds["registration"]["properties"]["schema"]["const"] == "framework.registration/1"
    assert "diff" in kinds["amendment"]["required"]
    assert kinds["trial.request"]["properties"]["kind"]["const"] == "request"
