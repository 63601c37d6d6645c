"""Experimental design: conditions as the product of factor levels, and the launch schedule.

Pure functions. The launch is the unit of replication; launches are run in randomized complete
blocks (each block holds one launch of every condition, in a seeded random order) so that slow
drift of the machine (thermals, other tenants) spreads evenly over conditions instead of
biasing whichever condition happened to run last.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from framework.core.spec import Experiment, Hypothesis, Level, Workload


@dataclass(frozen=True)
class Condition:
    index: int
    levels: dict[str, str]

    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.levels.items())


@dataclass(frozen=True)
class PlannedLaunch:
    condition: Condition
    replicate: int
    block: int
    seed: int

    @property
    def launch_id(self) -> str:
        return f"c{self.condition.index}-r{self.replicate}"


def conditions(h: Hypothesis) -> list[Condition]:
    """Every combination of factor levels, factors and levels in the order the file declares them."""
    names = list(h.factors)
    combos = itertools.product(*(list(h.factors[n].levels) for n in names))
    return [Condition(i, dict(zip(names, combo, strict=False))) for i, combo in enumerate(combos)]


def matching(conds: list[Condition], where: dict[str, str]) -> list[Condition]:
    return [c for c in conds if all(c.levels.get(k) == v for k, v in where.items())]


def launch_seed(design_seed: int, condition: int, replicate: int) -> int:
    """A distinct, reproducible server seed per launch (so launches differ, as on a real rig)."""
    ss = np.random.SeedSequence([design_seed, condition, replicate])
    return int(ss.generate_state(1)[0] & 0x7FFFFFFF)


def schedule(
    h: Hypothesis, launches: int, seed: int, order: str = "randomized_blocks", first_replicate: int = 0
) -> list[PlannedLaunch]:
    """The order in which to launch: `launches` blocks, each one launch of every condition.

    `first_replicate` lets sequential designs append further blocks with fresh replicate numbers;
    the permutation of a block depends only on (seed, block), so a plan is reproducible piecewise.
    """
    conds = conditions(h)
    plan: list[PlannedLaunch] = []
    for block in range(first_replicate, first_replicate + launches):
        order_idx = list(range(len(conds)))
        if order == "randomized_blocks":
            rng = np.random.default_rng([seed, block])
            order_idx = [int(i) for i in rng.permutation(len(conds))]
        for i in order_idx:
            c = conds[i]
            plan.append(PlannedLaunch(c, block, block, launch_seed(seed, c.index, block)))
    return plan


def machine_slot(block: int, machines: int) -> int:
    """The machine slot a block runs on when a design spreads its launches over `machines` machines.

    Machines are a blocking factor above the blocks: every block holds one launch of every condition,
    so every machine measures every condition and the machine cancels from within-machine contrasts;
    blocks alternate between machines (b mod machines), so a sequential extension or an interrupted run
    keeps the machines balanced.
    """
    return block % machines if machines > 1 else 0


def levels_of(h: Hypothesis, cond: Condition) -> list[Level]:
    return [h.factors[f].levels[lv] for f, lv in cond.levels.items()]


def server_args_for(h: Hypothesis, exp: Experiment, cond: Condition) -> list[str]:
    """The server flags of a condition: experiment base flags, hypothesis flags, then each level's."""
    args = list(exp.server_args) + list(h.server_args)
    for level in levels_of(h, cond):
        args += list(level.server_args)
    return args


def workload_for(h: Hypothesis, exp: Experiment, cond: Condition) -> Workload:
    data = exp.workload.model_dump()
    for level in levels_of(h, cond):
        data.update(level.workload)
    return Workload.model_validate(data)


def env_for(h: Hypothesis, cond: Condition) -> dict[str, str]:
    env: dict[str, str] = {}
    for level in levels_of(h, cond):
        env.update(level.env)
    return env


def sim_profile_for(h: Hypothesis, exp: Experiment, cond: Condition) -> str:
    profile = exp.sim.profile
    for level in levels_of(h, cond):
        profile = level.sim_profile or profile
    return profile


def python_for(h: Hypothesis, cond: Condition, default: str) -> str:
    python = default
    for level in levels_of(h, cond):
        python = level.python or python
    return python
