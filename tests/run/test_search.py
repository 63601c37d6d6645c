"""`python -m framework search`: bad search blocks refused before any server starts, and a winner chosen on noise
alone not confirmed (its confirmation registered before its launches, its link to the search audited)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from cli_helpers import ROOT, framework, ledger_records, no_servers_left

SEARCH = """\
name: {name}
statement: A search over {what}.
experiment: rtx_pro_6000_tp8
metric: decode_tok_s
server_args: [--speculative-algorithm, EAGLE3, --speculative-draft-model-path, lmsys/SGLang-EAGLE3-DeepSeek-V3,
              --speculative-eagle-topk, "1", --speculative-num-steps, "3", --enable-flashinfer-allreduce-fusion]
search:
{search}
design: {{requests: 2, warmup: 1, seed: 11}}
"""

NOISE_ONLY = """\
  space:
    draft_tokens: {flag: --speculative-num-draft-tokens, values: [2, 4, 6, 8]}
  reference: {draft_tokens: 4}
  goal: {metric: decode_tok_s, direction: maximize}
  budget: {launches: 6, refine: 0}
  startup_trials: 2
  confirm: {min_effect: 0.05, launches: 3}
"""


# a space with a winner that is not the reference: one stream decodes about 25% faster than two in the sim's model,
# so the search confirms (a search choosing its own reference confirms nothing, issue 35)
WINNER = """\
  space:
    streams: {workload: concurrency, values: [1, 2]}
  reference: {streams: 2}
  goal: {metric: decode_tok_s, direction: maximize}
  budget: {launches: 6, refine: 0}
  sampler: random
  confirm: {min_effect: 0.05, launches: 3}
"""


def write_search(workdir: Path, name: str, block: str, what: str = "draft tokens") -> Path:
    (workdir / "hyp").mkdir(exist_ok=True)
    path = workdir / "hyp" / f"{name}.yaml"
    path.write_text(SEARCH.format(name=name, what=what, search=block))
    return path


BAD = [
    ("unknown dimension field",
     NOISE_ONLY.replace("{flag: --speculative-num-draft-tokens,", "{flagg: --speculative-num-draft-tokens,"),
     "search.space.draft_tokens.flagg", "allowed"),
    ("bad constraint", NOISE_ONLY.replace("direction: maximize}", "direction: maximize, constraints: [ttft < 1]}"),
     "search.goal.constraints", "METRIC <= NUMBER"),
    ("unknown direction", NOISE_ONLY.replace("direction: maximize", "direction: up"), "search.goal.direction",
     "maximize"),
    ("reference outside the space", NOISE_ONLY.replace("{draft_tokens: 4}", "{draft_tokens: 5}"), "search",
     "not one of its values"),
    ("no min_effect", NOISE_ONLY.replace("min_effect: 0.05, ", ""), "search.confirm.min_effect", "Field required"),
    ("one launch per candidate", NOISE_ONLY + "  launches_per_candidate: 1\n", "search.launches_per_candidate",
     "greater than or equal to 2"),
    ("an unmodelled flag varied on the sim",
     NOISE_ONLY.replace("draft_tokens: {flag: --speculative-num-draft-tokens, values: [2, 4, 6, 8]}",
                        "draft_tokens: {flag: --mem-fraction-static, values: ['0.8', '0.9']}")
     .replace("{draft_tokens: 4}", "{draft_tokens: '0.8'}"),
     "factors", "the simulator cannot answer this"),
    ("racing beside a selection", NOISE_ONLY.replace("refine: 0}", "refine: 2}") + "  select: {delta: 0.01}\n",
     "search", "leave refine unset"),
    ("a selection's first stage above its cap",
     NOISE_ONLY.replace("refine: 0}", "}") + "  select: {delta: 0.01, first_stage: 6, max_launches: 4}\n",
     "search.select", "first_stage (6) is above max_launches (4)"),
    ("a selection without delta", NOISE_ONLY.replace("refine: 0}", "}") + "  select: {finalists: 2}\n",
     "search.select.delta", "Field required"),
]


@pytest.mark.parametrize("case, block, field, fragment", BAD, ids=[b[0] for b in BAD])
def test_a_bad_search_block_is_one_line_and_exit_2_before_any_server(workdir, case, block, field, fragment,
                                                                    monkeypatch, capsys):
    from framework.cli import main

    write_search(workdir, "bad", block)
    monkeypatch.chdir(workdir)
    code = main(["search", "hypothesis=bad", f"paths.hypotheses={workdir / 'hyp'}"])
    err = capsys.readouterr().err
    assert code == 2, err
    line = err.strip()
    assert "\n" not in line and "Traceback" not in line and "pydantic.dev" not in line, line
    assert f": {field}" in line and fragment in line and "bad.yaml" in line, line
    assert not (workdir / "outputs").exists() and not (workdir / "verdicts.jsonl").exists()


def test_search_needs_a_search_block_and_run_refuses_a_search_only_file(workdir):
    out = framework("search", "hypothesis=eagle3_allreduce", cwd=workdir)
    assert out.returncode == 2 and "eagle3_allreduce.yaml: search: no search block" in out.stderr, out.stderr
    out = framework("run", "hypothesis=eagle3_tuning", cwd=workdir)
    assert out.returncode == 2 and "python -m framework search hypothesis=eagle3_tuning" in out.stderr, out.stderr
    assert not (workdir / "outputs").exists() and not (workdir / "verdicts.jsonl").exists()


@pytest.mark.e2e  # a whole search and its confirmation, about 20 s
def test_a_winner_chosen_on_noise_alone_is_not_confirmed_and_its_link_audits(workdir):
    """With topk 1 SGLang (and so the sim) sets the draft tokens to steps + 1: every candidate of this space is the
    same configuration, so whichever wins, wins on noise; the confirmation on fresh launches must not support a 5%
    gain. The confirmation is registered before its launches, and audit checks the link to the search."""
    write_search(workdir, "noise_only", NOISE_ONLY)
    out = framework("search", "hypothesis=noise_only", f"paths.hypotheses={workdir / 'hyp'}", "run_dir=s",
                    cwd=workdir)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert no_servers_left(workdir)
    summary = json.loads((workdir / "s" / "search.json").read_text())
    # at most 6: the race stops when the leader is alone (issue 35), and Optuna may run out of new points first
    assert summary["exploratory"] is True and summary["launches_spent"] <= 6 and summary["grid_launches"] == 8
    assert len(summary["chosen"]) == 1 and summary["front"]
    if summary["chosen"][0]["point"] == summary["reference"]:  # the noise chose the reference: nothing confirmed
        assert "chose its own reference" in summary["confirmation_skipped"]
        assert [r["kind"] for r in ledger_records(workdir / "verdicts.jsonl")] == ["exploration"]
        assert framework("audit", cwd=workdir).returncode == 0
        return
    records = ledger_records(workdir / "verdicts.jsonl")
    assert [r["kind"] for r in records] == ["exploration", "registration", "verdict"]
    exploration, reg, verdict = records
    assert exploration["exploratory"] is True and exploration["search_id"] == summary["id"]
    assert verdict["registration"] == reg["hash"] and reg["registered"] < verdict["started"]
    assert verdict["search"]["id"] == summary["id"] and verdict["search"]["exploration"] == exploration["hash"]
    assert verdict["verdict"] != "supported", verdict["predictions"]
    # the chosen configuration was confirmed on launches none of which the exploration had
    seeds = {r["seed"] for r in ledger_records(workdir / "s" / "trials.jsonl") if r["kind"] == "launch"}
    fresh = {r["seed"] for r in ledger_records(workdir / "s" / "confirm" / "trials.jsonl") if r["kind"] == "launch"}
    assert fresh and not seeds & fresh
    assert (workdir / "s" / "report.html").is_file()
    assert (workdir / "s" / "report_figures" / "search-front.png").is_file()
    audit = framework("audit", cwd=workdir)
    assert audit.returncode == 0, audit.stdout[-2000:] + audit.stderr[-2000:]
    # a search.json edited after the confirmation was drawn from it breaks the link
    (workdir / "s" / "search.json").write_text(json.dumps({**summary, "chosen": []}))
    audit = framework("audit", cwd=workdir)
    assert audit.returncode == 1 and "search.json" in " ".join(audit.stderr.split()), audit.stderr[-2000:]


def test_the_shipped_search_file_is_valid_and_its_grid_costs_more_than_its_budget():
    from framework.core.spec import load_hypothesis

    h = load_hypothesis(ROOT / "hypotheses" / "eagle3_tuning.yaml")
    assert h.search is not None and h.search.budget.launches < h.search.grid_launches()


# issue 31: a budget of 10000 launches on a 3-point space re-launched one point without end, with no long-run gate
THREE_POINTS = NOISE_ONLY.replace("values: [2, 4, 6, 8]", "values: [2, 4, 6]").replace(
    "budget: {launches: 6, refine: 0}", "budget: {launches: 10000}")


def test_a_search_estimated_at_hours_needs_allow_long(workdir, monkeypatch, capsys):
    from framework.cli import main

    exp = yaml.safe_load((ROOT / "experiments" / "rtx_pro_6000_tp8.yaml").read_text())
    exp["workload"].update(request_rate=1, duration_s=86_400)  # a day of open loop per launch, 1.2 h at speed-up 20
    (workdir / "exp").mkdir()
    (workdir / "exp" / "rtx_pro_6000_tp8.yaml").write_text(yaml.safe_dump(exp))
    write_search(workdir, "day", NOISE_ONLY.replace("launches: 6, refine: 0", "launches: 10, refine: 0"))
    monkeypatch.chdir(workdir)
    code = main(["search", "hypothesis=day", f"paths.hypotheses={workdir / 'hyp'}",
                 f"paths.experiments={workdir / 'exp'}"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    assert err.strip() == ("error: command line: allow_long: estimated wall time at least 12.0 h (up to 10 launches, "
                           "the longest 1.2 h of open-loop schedule at speed-up 20; start-up and closed-loop requests "
                           "come on top): more than 4.0 h; add allow_long=true to run it (or shorten duration_s, lower "
                           "search.budget.launches)")
    assert not (workdir / "outputs").exists() and not (workdir / "verdicts.jsonl").exists()


@pytest.mark.e2e  # a capped search and its confirmation on the sim, about 90 s
def test_a_budget_larger_than_the_space_can_use_is_capped_and_says_so(workdir):
    write_search(workdir, "three", THREE_POINTS)
    out = framework("search", "hypothesis=three", f"paths.hypotheses={workdir / 'hyp'}", "run_dir=s",
                    "progress=false", "report=false", cwd=workdir, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    text = " ".join(out.stdout.split())
    assert ("note: budget.launches 10000 is more than this space can use (3 points x 20 launches at most each): "
            "capped at 60") in text
    summary = json.loads((workdir / "s" / "search.json").read_text())
    assert summary["budget"]["launches"] == 60 and summary["budget_declared"] == 10000
    assert summary["launches_spent"] <= 60
    launches = [r for r in ledger_records(workdir / "s" / "trials.jsonl") if r["kind"] == "launch"]
    per_point: dict[int, int] = {}
    for r in launches:
        per_point[r["condition"]] = per_point.get(r["condition"], 0) + 1
    assert max(per_point.values()) <= 20, per_point


@pytest.mark.e2e  # three whole searches, about a minute
def test_the_same_search_in_a_fresh_directory_gives_the_same_confirmation_seeds_and_figures(tmp_path):
    """Every seed a search uses derives from the hypothesis file, its declared seed and the search-run index (how
    many searches of the file the ledger holds), never from the clock; the confirmation's seeds stay fresh."""
    runs = []
    for name in ("first", "second"):
        workdir = tmp_path / name
        workdir.mkdir()
        write_search(workdir, "winner", WINNER, "streams")
        out = framework("search", "hypothesis=winner", f"paths.hypotheses={workdir / 'hyp'}", "run_dir=s",
                        "report=false", cwd=workdir)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        explored = [r["seed"] for r in ledger_records(workdir / "s" / "trials.jsonl") if r["kind"] == "launch"]
        fresh = [r["seed"] for r in ledger_records(workdir / "s" / "confirm" / "trials.jsonl")
                 if r["kind"] == "launch"]
        assert fresh and not set(explored) & set(fresh)
        verdict = ledger_records(workdir / "verdicts.jsonl")[-1]
        runs.append((explored, fresh, [(p["id"], p.get("estimate"), p.get("ci")) for p in verdict["predictions"]],
                     verdict["verdict"]))
    assert runs[0] == runs[1]
    # the same search again in the first ledger is search-run 1 of that file: other fresh confirmation seeds
    workdir = tmp_path / "first"
    out = framework("search", "hypothesis=winner", f"paths.hypotheses={workdir / 'hyp'}", "run_dir=s2",
                    "report=false", cwd=workdir)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    again = [r["seed"] for r in ledger_records(workdir / "s2" / "confirm" / "trials.jsonl") if r["kind"] == "launch"]
    assert again and not set(again) & (set(runs[0][1]) | set(runs[0][0]))
