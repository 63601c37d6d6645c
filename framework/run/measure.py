"""The measuring loop: launch block after block; a fixed design runs every block, a sequential one looks
at the data after each and stops once every prediction is decided or the cap is reached."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from rich.console import Console

from framework.analysis.verdicts import Analysis, analyze, sequential_look
from framework.core import design as design_mod
from framework.core.trials import Trials
from framework.core.workload import total_requests
from framework.present.progress import RunProgress
from framework.run.context import RunContext
from framework.run.session import Launched, Session, Step, drive


@dataclass
class Measured:
    """What the measuring loop leaves: the final analysis and how the run came to stop."""

    analysis: Analysis
    looks: list[dict[str, Any]]
    stop_reason: str


class Blocks:
    """The fixed/sequential policy (framework.run.session.LaunchPolicy): the randomized schedule block by block;
    a fixed design's one block holds every launch, a sequential design's analysis looks after each block and
    stops once every prediction is decided or the cap is reached."""

    def __init__(self, ctx: RunContext, progress: RunProgress | None = None) -> None:
        self.h, self.d, self.progress = ctx.hypothesis, ctx.design, progress
        seq = self.d.sequential
        self.max_per_condition = (seq.max_launches or self.d.launches) if seq.enabled else self.d.launches
        self.block_size = min(seq.block, self.max_per_condition) if seq.enabled else self.d.launches
        self.max_looks = math.ceil((self.max_per_condition - self.block_size) / seq.block) + 1
        self.done = 0
        self.started = False
        self.looks: list[dict[str, Any]] = []
        self.result: Measured | None = None

    def _block(self) -> list[Step]:
        return [Step(p, p.replicate, self.max_per_condition)
                for p in design_mod.schedule(self.h, self.block_size, self.d.seed, self.d.order,
                                             first_replicate=self.done)]

    def next(self, trials: Trials) -> list[Step]:
        h, d, seq = self.h, self.d, self.d.sequential
        if not self.started:
            self.started = True
            return self._block()
        self.done += self.block_size
        if not seq.enabled:
            analysis = analyze(h, trials.rows, alpha=d.alpha, method=d.analysis, seed=d.seed)
            self.result = Measured(analysis, self.looks, "fixed design: all planned launches done")
            return []
        analysis, stop, reason = sequential_look(
            h, trials.rows, look=len(self.looks) + 1, max_looks=self.max_looks, alpha=d.alpha, method=d.analysis,
            seed=d.seed)
        self.looks.append({"look": len(self.looks) + 1, "launches_per_condition": self.done, "stop": stop,
                           "reason": reason, "predictions": [p.model_dump(mode="json") for p in analysis.predictions]})
        assert self.progress is not None
        self.progress.note(f"look {len(self.looks)}: {reason}")
        if stop or self.done >= self.max_per_condition:
            self.progress.finish_early()
            final = reason if stop else f"reached design.max_launches={self.max_per_condition}: {reason}"
            self.result = Measured(analysis, self.looks, final)
            return []
        self.block_size = min(seq.block, self.max_per_condition - self.done)
        return self._block()

    def observe(self, step: Step, launched: Launched, trials: Trials) -> None:
        """A design's plan does not depend on single launches: it looks only between blocks."""


def measure(session: Session, console: Console) -> Measured:
    """Launch block after block (`Blocks`) through the session; the final analysis and how the run stopped."""
    ctx = session.ctx
    policy = Blocks(ctx)
    progress = RunProgress(console, ctx.hypothesis.name,
                           total_launches=len(design_mod.conditions(ctx.hypothesis)) * policy.max_per_condition,
                           requests_per_launch=requests_per_launch(ctx), enabled=ctx.progress)
    policy.progress = progress
    with progress:
        drive(session, policy, progress)
    assert policy.result is not None
    return policy.result


def requests_per_launch(ctx: RunContext) -> int:
    """Requests a launch may send (warm-up, measured, a closed loop's cool-down), the most of any condition."""
    counts = []
    for cond in design_mod.conditions(ctx.hypothesis):
        w = design_mod.workload_for(ctx.hypothesis, ctx.experiment, cond)
        cooldown = w.concurrency - 1 if not w.open_loop else 0
        counts.append(sum(total_requests(w, ctx.design.requests, ctx.design.warmup)) + cooldown)
    return max(counts, default=ctx.design.requests + ctx.design.warmup)
