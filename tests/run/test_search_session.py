"""A search explores through the same door (framework.run.session) as its confirmation runs: the exploration's
launches honour `sim_profile=`, `client.workers=` and the backend's API key (kept out of every file), and a
literal secret on the command line is refused before anything starts, as `run` refuses it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import ROOT, framework, ledger_records, no_servers_left

KEY = "sk-search-session-0123456789abcdef"  # long enough to be redacted (framework.run.redaction.MIN_LENGTH)
PROFILE = "h200_tp8"  # not the experiment's own profile (rtx_pro_6000_tp8): the launches must say which they served

SMALL = """\
name: small_search
statement: A small search over the draft steps.
experiment: two_streams
metric: decode_tok_s
server_args: [--speculative-algorithm, EAGLE3, --speculative-draft-model-path, lmsys/SGLang-EAGLE3-DeepSeek-V3,
              --speculative-eagle-topk, "1"]
search:
  space:
    steps: {flag: --speculative-num-steps, values: [1, 3]}   # 3 is 17-23% faster on both profiles: it confirms
  reference: {steps: 1}
  goal: {metric: decode_tok_s, direction: maximize}
  budget: {launches: 4, refine: 0}
  sampler: random
  confirm: {min_effect: 0.0, launches: 2}
design: {requests: 2, warmup: 1, seed: 5}
"""


def _write(workdir: Path) -> list[str]:
    """The search and its experiment (the shipped one at 2 closed-loop streams, so 2 workers each get one)."""
    (workdir / "hyp").mkdir(exist_ok=True)
    (workdir / "exp").mkdir(exist_ok=True)
    (workdir / "hyp" / "small_search.yaml").write_text(SMALL)
    exp = (ROOT / "experiments" / "rtx_pro_6000_tp8.yaml").read_text()
    (workdir / "exp" / "two_streams.yaml").write_text(
        exp.replace("name: rtx_pro_6000_tp8", "name: two_streams").replace("concurrency: 1", "concurrency: 2")
        .replace("output_tokens: 256", "output_tokens: 64"))
    return [f"paths.hypotheses={workdir / 'hyp'}", f"paths.experiments={workdir / 'exp'}"]


def _launches(path: Path) -> list[dict]:
    return [r for r in ledger_records(path) if r["kind"] == "launch"]


def _files_holding(root: Path, value: str) -> list[str]:
    return [str(p) for p in sorted(root.rglob("*")) if p.is_file() and value.encode() in p.read_bytes()]


@pytest.mark.e2e
def test_the_exploration_runs_with_the_profile_the_workers_and_the_key_of_its_confirmation(workdir: Path):
    out = framework("search", "hypothesis=small_search", *_write(workdir), f"sim_profile={PROFILE}",
                    "client.workers=2", "backend.api_key=${oc.env:SEARCH_TEST_KEY}", "run_dir=s", cwd=workdir,
                    env={"SEARCH_TEST_KEY": KEY})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert no_servers_left(workdir)
    explored = _launches(workdir / "s" / "trials.jsonl")
    confirmed = _launches(workdir / "s" / "confirm" / "trials.jsonl")
    assert explored and confirmed
    for rows in (explored, confirmed):  # the exploration as its confirmation: 2 workers, the twin served
        assert {r.get("client_workers") for r in rows} == {2}, [r.get("client_workers") for r in rows]
        assert {(r.get("server_info") or {}).get("sim_profile") for r in rows} == {PROFILE}
        assert all(r.get("machine") for r in rows)  # and where it ran
    held = _files_holding(workdir, KEY)
    assert not held, held  # not in trials, logs, search.json, the report, the ledger or its salt


@pytest.mark.e2e
def test_a_key_on_the_servers_command_line_is_redacted_from_the_explorations_rows_and_logs(workdir: Path):
    """SGLang takes the key only as --api-key (framework.execution.backends): on argv, so in the launch rows and
    the server log; the sim takes the same flag, so the exploration's redactor is tested here without a GPU."""
    out = framework("search", "hypothesis=small_search", *_write(workdir), "backend.api_key=${oc.env:SEARCH_TEST_KEY}",
                    "backend.extra_args=[--api-key,'${oc.env:SEARCH_TEST_KEY}']", "report=false", "run_dir=s",
                    cwd=workdir, env={"SEARCH_TEST_KEY": KEY})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert no_servers_left(workdir)
    argv = " ".join(a for r in _launches(workdir / "s" / "trials.jsonl") for a in r.get("argv") or [])
    assert "--api-key [redacted hmac-sha256:" in argv, argv[-500:]
    held = _files_holding(workdir, KEY)
    assert not held, held


def test_the_exploration_refuses_a_literal_secret_on_the_command_line_before_anything_starts(workdir: Path):
    out = framework("search", "hypothesis=small_search", *_write(workdir), f"backend.api_key={KEY}", "run_dir=s",
                    cwd=workdir, timeout=120)
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    assert "backend.api_key" in out.stderr and "visible to every user of this machine" in " ".join(out.stderr.split())
    assert not (workdir / "s").exists() and not (workdir / "verdicts.jsonl").exists()
    assert KEY not in json.dumps(sorted(str(p) for p in workdir.rglob("*")))


@pytest.mark.parametrize("override", ["machine.slot=0", "resume=."])
def test_a_search_refuses_what_its_policy_could_not_keep_to(workdir: Path, override: str):
    """Another machine's launches (machine.slot) or a resume's would be skipped, which a search cannot choose around."""
    out = framework("search", "hypothesis=small_search", *_write(workdir), override, "run_dir=s", cwd=workdir,
                    timeout=120)
    assert out.returncode == 2 and override.split("=")[0] in out.stderr, out.stdout[-2000:] + out.stderr[-2000:]
    assert not (workdir / "s").exists()
