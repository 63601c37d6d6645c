"""The sim's own /get_server_info fields."""

from __future__ import annotations

from typing import Any

from framework.servers.sim.args import SimServerArgs
from framework.servers.sim.flags import sglang_version
from framework.servers.sim.profile import Profile


def sim_backend_info(profile: Profile, args: SimServerArgs) -> dict[str, Any]:
    """The sim's own ``/get_server_info`` fields: which profile it models, at what speed-up (and, when
    on, the machine-level effect it applies)."""
    machine = ({"sim_machine_effect": args.sim_machine_effect, "sim_machine": args.sim_machine}
               if args.sim_machine_effect > 0 else {})
    if args.sim_decode_slowdown != 1.0:  # the planted-regression test knob, when set
        machine = {**machine, "sim_decode_slowdown": args.sim_decode_slowdown}
    return {**machine,
        "version": sglang_version(),  # the SGLang release whose flags and API the sim serves
        "sim_version": profile.version,
        "backend": "sim",
        "sim_profile": profile.name,
        "sim_profile_description": profile.description,
        "sim_stack": profile.stack,
        "sim_hardware": profile.hardware,
        "sim_speedup": args.sim_speedup,
        "sim_noise_scale": args.sim_noise_scale,
        "sim_context_length": profile.context_length,
    }
