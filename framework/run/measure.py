"""The measuring loop: launch block after block; a fixed design runs every block, a sequential one looks
at the data after each and stops once every prediction is decided or the cap is reached."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from rich.console import Console

from framework.analysis.verdicts import Analysis, analyze, sequential_look
from framework.core import design as design_mod
from framework.core.workload import total_requests
from framework.execution.launcher import raise_if_signalled
from framework.present.progress import RunProgress
from framework.run.context import RunContext
from framework.run.launch import run_launch
from framework.run.writer import TrialsWriter


@dataclass
class Measured:
    """What the measuring loop leaves: the final analysis and how the run came to stop."""

    analysis: Analysis
    looks: list[dict[str, Any]]
    stop_reason: str


def measure(ctx: RunContext, writer: TrialsWriter, reused: set[str], attempts: dict[str, int],
            console: Console) -> Measured:
    """Launch block after block; a fixed design runs all of them, a sequential one looks after each."""
    h, d = ctx.hypothesis, ctx.design
    seq = d.sequential
    max_per_condition = (seq.max_launches or d.launches) if seq.enabled else d.launches
    first_block = min(seq.block, max_per_condition) if seq.enabled else d.launches
    max_looks = math.ceil((max_per_condition - first_block) / seq.block) + 1
    progress = RunProgress(console, h.name, total_launches=len(design_mod.conditions(h)) * max_per_condition,
                           requests_per_launch=requests_per_launch(ctx), enabled=ctx.progress)
    looks: list[dict[str, Any]] = []
    done, block_size = 0, first_block
    with progress:
        while True:
            for planned in design_mod.schedule(h, block_size, d.seed, d.order, first_replicate=done):
                if planned.launch_id in reused:
                    progress.launch_reused(planned.condition)
                    continue
                slot = design_mod.machine_slot(planned.block, d.machines)
                if ctx.machine_slot is not None and slot != ctx.machine_slot:
                    continue  # another machine's block (machine.slot): its run, or a resume there, measures it
                raise_if_signalled()  # a stop signal whose exception something swallowed: no further launch
                progress.launch_started(planned.condition, planned.replicate, max_per_condition)
                run_launch(ctx, planned, attempts.get(planned.launch_id, 0) + 1, writer, progress)
                progress.launch_done()
            done += block_size
            raise_if_signalled()  # nor an analysis or a record of a run that was told to stop
            if not seq.enabled:
                analysis = analyze(h, writer.rows, alpha=d.alpha, method=d.analysis, seed=d.seed)
                return Measured(analysis, looks, "fixed design: all planned launches done")
            analysis, stop, reason = sequential_look(
                h, writer.rows, look=len(looks) + 1, max_looks=max_looks, alpha=d.alpha, method=d.analysis,
                seed=d.seed)
            looks.append({"look": len(looks) + 1, "launches_per_condition": done, "stop": stop, "reason": reason,
                          "predictions": [p.model_dump(mode="json") for p in analysis.predictions]})
            progress.note(f"look {len(looks)}: {reason}")
            if stop or done >= max_per_condition:
                progress.finish_early()
                final = reason if stop else f"reached design.max_launches={max_per_condition}: {reason}"
                return Measured(analysis, looks, final)
            block_size = min(seq.block, max_per_condition - done)


def requests_per_launch(ctx: RunContext) -> int:
    """Requests a launch may send (warm-up, measured, a closed loop's cool-down), the most of any condition."""
    counts = []
    for cond in design_mod.conditions(ctx.hypothesis):
        w = design_mod.workload_for(ctx.hypothesis, ctx.experiment, cond)
        cooldown = w.concurrency - 1 if not w.open_loop else 0
        counts.append(sum(total_requests(w, ctx.design.requests, ctx.design.warmup)) + cooldown)
    return max(counts, default=ctx.design.requests + ctx.design.warmup)
