"""The ledger's record kinds (pydantic): what a verdict, a registration and an amendment hold.

The verdict record follows the contract in the design notes (schema `framework.verdict/1`);
extra keys are welcome, and these names are relied upon by checks and by `audit`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from framework.analysis.rules import CURRENT as RULES_VERSION
from framework.analysis.verdicts import Verdict


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
    ok: int  # started and answered /health
    failed: int  # did not start
    without_data: int = 0  # started, but no measured request succeeded (counted in ok, not in the metric)


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
    marks: list[str] = []  # what must be read beside the verdict (not modelled by the sim, unreliable)


class TrialsRef(BaseModel):
    path: str
    sha256: str
    rows: int | None = None
    bytes: int | None = None  # the file's length when the verdict was drawn: a later resume may append to it


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
    rules_version: int = RULES_VERSION  # the decision rules it was decided under (framework.analysis.rules)
    # the machines it covers ({scope: "this machine" | "N machines", machines, launches_by_machine,
    # design_machines}; framework.analysis.machines.population); None before rules version 3
    population: dict[str, Any] | None = None
    started: str
    finished: str

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)


class RegistrationRecord(_Record):
    """A hypothesis declared before any data: its content, the analysis plan and the code version.

    A verdict record points at the registration (or latest amendment) it ran under via
    `registration` (that record's hash), so an auditor can see the plan came before the data.
    """

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    schema_: Literal["framework.registration/1"] = Field("framework.registration/1", alias="schema")
    kind: Literal["registration"] = "registration"
    hypothesis: HypothesisRef  # content and sha256 of the file as registered
    analysis: dict[str, Any] = {}  # the analysis settings (alpha, method, ...) as planned
    analysis_sha256: str
    git_commit: str | None = None
    registered: str  # ISO 8601 UTC

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)


class AmendmentRecord(_Record):
    """A transparent change to a registered hypothesis (as in OSF practice): what changed, and when.

    `amends` is the hash of the registration or amendment it supersedes; `diff` is a unified diff
    of the old and new hypothesis content (and of the analysis settings, when those changed).
    """

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    schema_: Literal["framework.amendment/1"] = Field("framework.amendment/1", alias="schema")
    kind: Literal["amendment"] = "amendment"
    hypothesis: HypothesisRef  # the new content and its sha256
    previous_sha256: str
    amends: str  # hash of the superseded registration/amendment record
    registration: str  # hash of the original registration record
    diff: str
    analysis: dict[str, Any] = {}
    analysis_sha256: str
    previous_analysis_sha256: str | None = None
    git_commit: str | None = None
    amended: str  # ISO 8601 UTC

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)


class ExplorationRecord(_Record):
    """What a search explored (`python -m framework search`): exploratory, never a verdict.

    It names the search's id, its trials and its search.json (each with its SHA-256), and the configurations
    chosen for confirmation; the confirmatory verdict record that follows names it (`search`), and `audit`
    checks both links.
    """

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    schema_: Literal["framework.exploration/1"] = Field("framework.exploration/1", alias="schema")
    kind: Literal["exploration"] = "exploration"
    exploratory: Literal[True] = True
    hypothesis: HypothesisRef  # the search hypothesis file as it was run
    backend: str
    search_id: str
    search_json: dict[str, str]  # {path (relative to the ledger), sha256}
    trials: TrialsRef
    launches_spent: int
    chosen: list[dict[str, str]]
    environment: dict[str, Any] = {}
    run_dir: str | None = None
    started: str
    finished: str

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)


class BisectRecord(_Record):
    """A bisection over versions (`python -m framework bisect`): the first bad version, or why none was named.

    It names the registration in force, the trials file (SHA-256) and bisect.json (every version's launches and
    figures, every comparison); `audit` replays the bisection from the trials rows under the record's rules
    version (framework.analysis.bisect.state_of) and checks the outcome, the versions named and the launches.
    """

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    schema_: Literal["framework.bisect/1"] = Field("framework.bisect/1", alias="schema")
    kind: Literal["bisect"] = "bisect"
    rules_version: int = RULES_VERSION
    hypothesis: HypothesisRef
    registration: str | None = None  # hash of the registration (or amendment) in force
    backend: str
    bisect_id: str
    outcome: str  # named, no_change, undecided, failed, stopped (its max_seconds spent)
    reason: str = ""
    first_bad: str | None = None
    last_good: str | None = None
    first_bad_commit: str | None = None
    step: dict[str, Any] | None = None  # ratio first bad / last good, its interval, its share of the total change
    probed: list[str] = []
    launches_spent: int
    linear_scan_launches: int
    gpu_hours: float = 0.0
    linear_scan_gpu_hours: float = 0.0
    bisect_json: dict[str, str]  # {path (relative to the ledger), sha256}
    trials: TrialsRef
    analysis: dict[str, Any] = {}  # the registered settings (alpha, threshold, margin, launches, ...)
    environment: dict[str, Any] = {}
    run_dir: str | None = None
    started: str
    finished: str

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)
