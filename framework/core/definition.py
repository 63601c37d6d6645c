"""The definition a launch was measured under, as three SHA-256 hashes, and which launches of a trials file
belong to the definition in force.

A run directory's launches are reused by `resume=` and recomputed by `audit`; both must know that a launch
ran the hypothesis the verdict names. Every launch row (and launch end row) therefore carries `definition`:

- `hypothesis`: the hypothesis file's bytes (the SHA-256 its registration records);
- `experiment`: the experiment as resolved (canonical JSON; a sim profile given as a file by its bytes);
- `design`: the parts of the design a single launch depends on (`DESIGN_KEYS`): not the number of launches,
  the stopping rule or alpha, so that adding launches to a run keeps its launches.

Pure: the caller hashes the files and passes the hashes.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Iterable

DESIGN_KEYS = ("requests", "warmup", "seed", "order")  # what a launch's plan and measurement depend on
PARTS = ("hypothesis", "experiment", "design")


def _sha(data: Any) -> str:
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def design_sha256(design: dict[str, Any]) -> str:
    """The hash of a design's per-launch parts (`design` as `Design.model_dump(mode="json")`, or as a record
    keeps it under `analysis.design`)."""
    return _sha({k: design.get(k) for k in DESIGN_KEYS})


def experiment_sha256(experiment: dict[str, Any], profile_sha256: str | None = None) -> str:
    """The hash of a resolved experiment (`Experiment.model_dump(mode="json")`); a sim profile read from a file
    counts by its bytes (`profile_sha256`), not by the path, so two machines with the file elsewhere agree."""
    data = json.loads(json.dumps(experiment, default=str))
    if profile_sha256 is not None:
        data.setdefault("sim", {})["profile"] = f"sha256:{profile_sha256}"
    return _sha(data)


def definition(hypothesis_sha256: str, experiment: dict[str, Any], design: dict[str, Any],
               profile_sha256: str | None = None) -> dict[str, str]:
    """The `definition` a launch row carries."""
    return {"hypothesis": hypothesis_sha256, "experiment": experiment_sha256(experiment, profile_sha256),
            "design": design_sha256(design)}


def differs(row_definition: Any, in_force: dict[str, str]) -> list[str]:
    """The parts (of `PARTS`) in which a row's definition differs from the one in force; [] when it matches."""
    if not isinstance(row_definition, dict):
        return list(PARTS)
    return [p for p in PARTS if row_definition.get(p) != in_force.get(p)]


def describe(parts: Iterable[str]) -> str:
    """'the hypothesis file and the design' for ['hypothesis', 'design']."""
    names = {"hypothesis": "the hypothesis file", "experiment": "the experiment", "design": "the design"}
    named = [names[p] for p in parts]
    return " and ".join(named) if len(named) < 3 else ", ".join(named[:-1]) + " and " + named[-1]


def launch_definitions(rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """{launch id: its launch row's `definition` (None for a row from before definitions)}, the last row of each."""
    out: dict[str, Any] = {}
    for r in rows:
        if r.get("kind") == "launch" and r.get("launch_id") is not None:
            out[str(r["launch_id"])] = r.get("definition")
    return out
