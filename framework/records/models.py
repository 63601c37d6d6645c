"""The ledger's record kinds (pydantic): what a verdict, a registration and an amendment hold.

The verdict record follows the contract in the design notes (schema `framework.verdict/1`);
extra keys are welcome, and these names are relied upon by checks and by `audit`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from framework.analysis import Verdict


class _Record(BaseModel):
    model_config = ConfigDict(extra="allow")
    prev_hash: str | None = None  # hash of the previous ledger line (the chain); set by the ledger
    hash: str | None = None  # this record's own hash; set by the ledger


class HypothesisRef(BaseModel):
    name: str
    sha256: str
    statement: str
    path: str | None = None
    content: str | None = None


class LaunchCounts(BaseModel):
    ok: int
    failed: int


class ConditionRecord(BaseModel):
    model_config = ConfigDict(extra="allow")
    levels: dict[str, str]
    server_args: list[str]
    launches: LaunchCounts
    metric: dict[str, Any]


class PredictionRecord(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str
    kind: str
    verdict: Verdict
    estimate: float | None
    ci: list[float] | None
    p_value: float | None
    reason: str


class TrialsRef(BaseModel):
    path: str
    sha256: str
    rows: int | None = None


class VerdictRecord(_Record):
    model_config = ConfigDict(extra="allow", populate_by_name=True)
    schema_: Literal["framework.verdict/1"] = Field("framework.verdict/1", alias="schema")
    kind: Literal["verdict"] = "verdict"
    hypothesis: HypothesisRef
    backend: str
    verdict: Verdict
    predictions: list[PredictionRecord]
    conditions: list[ConditionRecord]
    trials: TrialsRef
    environment: dict[str, Any]
    config: dict[str, Any]
    analysis: dict[str, Any] = {}
    run_dir: str | None = None
    registration: str | None = None  # hash of the registration record this run refers to
    started: str
    finished: str

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)
