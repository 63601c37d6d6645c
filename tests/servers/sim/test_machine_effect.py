"""The sim's machine-level effect: off by default, the same factor for the same machine, its own for each
configuration on it (so a flag's effect differs between machines), and on the server's command line."""

from __future__ import annotations

import math
import statistics

from framework.servers.sim import model
from framework.servers.sim.args import parse_server_args

EAGLE = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "d", "--speculative-num-steps", "3",
         "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]


def factor(machine: str | None, *flags: str, sd: float = 0.1) -> float:
    argv = [*flags, "--sim-machine-effect", repr(sd)] + (["--sim-machine", machine] if machine else [])
    return model.machine_factor(parse_server_args(argv, require_model_path=False))


def test_off_by_default_and_without_a_machine():
    assert model.machine_factor(parse_server_args([], require_model_path=False)) == 1.0
    assert factor(None) == 1.0 and factor("m1", sd=0.0) == 1.0


def test_the_same_machine_is_always_as_fast_and_the_port_does_not_matter():
    assert factor("m1") == factor("m1") == factor("m1", "--port", "1234", "--random-seed", "9")
    assert factor("m1") != factor("m2")


def test_a_flags_effect_differs_between_machines_by_about_sd_sqrt2():
    on = parse_server_args([*EAGLE, "--sim-machine-effect", "0.1"], require_model_path=False)
    off = parse_server_args(["--sim-machine-effect", "0.1"], require_model_path=False)
    logs = [math.log(model.machine_factor(on.model_copy(update={"sim_machine": f"m{i}"}))
                     / model.machine_factor(off.model_copy(update={"sim_machine": f"m{i}"}))) for i in range(300)]
    assert 0.1 < statistics.stdev(logs) < 0.18  # sqrt(2) * 0.1 = 0.141, 300 machines


def test_the_launch_draw_carries_the_machine_factor():
    from framework.servers.sim.engine import Engine
    from framework.servers.sim.profile import load_profile

    args = parse_server_args(["--sim-machine-effect", "0.1", "--sim-machine", "m1", "--sim-noise-scale", "0"],
                             require_model_path=False)
    engine = Engine(load_profile(args.sim_profile), args, seed=1)
    assert engine.launch is not None and engine.launch.factor == model.machine_factor(args) != 1.0
