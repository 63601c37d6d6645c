"""`python -m framework schema`: the JSON Schema of every record kind, generated from the pydantic models.

Ledger lines are verdict, registration and amendment records; trials files hold launch, request
and workload rows. Consumers outside Python can validate against these instead of reading our code.
"""

from __future__ import annotations

import json
from typing import Any

from framework.core.trials import LaunchRow, RequestRow, WorkloadRow
from framework.errors import EXIT_OK
from framework.records.models import (
    AmendmentRecord,
    BisectRecord,
    ExplorationRecord,
    RegistrationRecord,
    VerdictRecord,
)

KINDS = {
    "verdict": VerdictRecord,
    "registration": RegistrationRecord,
    "amendment": AmendmentRecord,
    "exploration": ExplorationRecord,
    "bisect": BisectRecord,
    "trial.launch": LaunchRow,
    "trial.request": RequestRow,
    "trial.workload": WorkloadRow,
}


def schemas() -> dict[str, Any]:
    """{kind: JSON Schema} with the ledger's own field names (`schema`, not `schema_`)."""
    return {kind: model.model_json_schema(by_alias=True, mode="serialization") for kind, model in KINDS.items()}


def main(args: list[str]) -> int:
    print(json.dumps({"$comment": "JSON Schema of every record kind: ledger lines (verdict, registration, "
                                  "amendment, exploration) and trials rows"
                                  " (trial.launch, trial.request, trial.workload)",
                      "kinds": schemas()}, indent=2))
    return EXIT_OK
