"""The session's launch loop with a policy of its own (as a commit bisection would be): the policy only chooses,
from the session's Trials; the session launches, writes the rows and keeps the index up to date."""

from __future__ import annotations

from pathlib import Path

from framework.core import design as design_mod
from framework.core.trials import FORMAT, LaunchRow, Trials
from framework.present.progress import RunProgress, make_console
from framework.run import session as session_mod
from framework.run.compose import compose
from framework.run.resolve import resolve_config
from framework.run.session import Launched, Session, Step, drive, open_context


class UntilTwoOk:
    """Launch condition 0 until two launches started: a policy reading nothing but the session's Trials."""

    def __init__(self, cond: design_mod.Condition) -> None:
        self.cond, self.seen = cond, []

    def next(self, trials: Trials) -> list[Step]:
        ok = [r for r in trials.of_kind("launch") if r["ok"]]
        if len(ok) >= 2:
            return []
        n = len(trials.of_kind("launch"))
        return [Step(design_mod.PlannedLaunch(self.cond, n, n, 100 + n), n, 2)]

    def observe(self, step: Step, launched: Launched, trials: Trials) -> None:
        self.seen.append((launched.launch_id, [r.ok for r in launched.trials.launches], len(trials.rows)))


def test_a_policy_chooses_from_the_sessions_trials_and_the_session_launches_and_indexes(tmp_path: Path, monkeypatch):
    def fake_launch(ctx, planned, attempt, writer, progress):  # a start-up failure, then launches that start
        ok = planned.replicate > 0
        writer.write(LaunchRow(format=FORMAT, launch_id=f"{planned.launch_id}-a{attempt}",
                               condition=planned.condition.index, levels=planned.condition.levels,
                               replicate=planned.replicate, block=planned.block, attempt=attempt, seed=planned.seed,
                               ok=ok, started="t", finished="t").to_json())

    monkeypatch.setattr(session_mod, "run_launch", fake_launch)
    cfg = compose(["hypothesis=eagle3_allreduce", f"ledger={tmp_path / 'v.jsonl'}"])
    ctx = open_context(cfg, resolve_config(cfg), tmp_path / "run", tmp_path)
    ctx.run_dir.mkdir()
    policy = UntilTwoOk(design_mod.conditions(ctx.hypothesis)[0])
    with Session(ctx) as session:
        drive(session, policy, RunProgress(make_console(), "t", 3, 1, enabled=False))
    assert [s[:2] for s in policy.seen] == [("c0-r0-a1", [False]), ("c0-r1-a1", [True]), ("c0-r2-a1", [True])]
    assert len(session.trials.of_kind("environment")) == 1 and len(session.trials.of_kind("launch")) == 3
    assert [s[2] for s in policy.seen] == [2, 3, 4]  # the index was up to date at each observation
