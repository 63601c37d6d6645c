"""The simulated server's performance model: pure functions from (profile, flags, batch) to model time.

No I/O, no clock, and no randomness except from a numpy ``Generator`` the caller passes in, so the
engine (the imperative shell) and the planner (:func:`framework.servers.sim.expected.expected_metrics`) see one model.
All durations are microseconds unless a name says ``_s``. Formulas and sources: docs/model.md.

The structure follows the seed's own explanation: each of the 61 layers does 2 tensor-parallel
all-reduces; in plain decode they overlap with compute (per-layer time is the max of the two), in
the EAGLE-3 verify pass they do not (the sum), which is why a faster all-reduce is neutral for
baseline decode and helps speculative decoding.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Sequence

from framework.servers.sim import engines, twin_steps
from framework.servers.sim.args import SimServerArgs, parse_server_args
from framework.servers.sim.profile import Profile

if TYPE_CHECKING:  # numpy is imported where it is used: the server binds its port before paying for it
    import numpy as np

DEFAULT_CUDA_GRAPH_MAX_BS = 160
CRASH_MESSAGE = "No supported CUDA architectures found for major versions [9, 10]"


# --------------------------------------------------------------------------- primitives


def interp(table: Sequence[tuple[float, float]], x: float) -> float:
    """Piecewise-linear lookup; linear extrapolation beyond both ends (one point: constant).

    A table point is returned exactly, and the segment's fraction is formed before it scales the
    rise: ``rise * dx / width`` rounds the product first, which for a subnormal width turned
    (0, 0), (5e-324, 1.5) into 2.0 at x = 5e-324. Interpolating from the nearer end keeps the
    result between the two points' values.
    """
    if not table:
        raise ValueError("empty table")
    if len(table) == 1:
        return float(table[0][1])
    xs = [p[0] for p in table]
    i = bisect.bisect_left(xs, x)
    if i < len(table) and xs[i] == x:
        return float(table[i][1])
    i = min(max(i, 1), len(table) - 1)
    (x0, y0), (x1, y1) = table[i - 1], table[i]
    t = (x - x0) / (x1 - x0)
    rise = y1 - y0
    return float(y0 + t * rise if t <= 0.5 else y1 - (1.0 - t) * rise)


# --------------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class SpecConfig:
    """EAGLE-style speculative decoding settings after SGLang's defaults are filled in."""

    algorithm: str
    num_steps: int
    topk: int
    num_draft_tokens: int

    @property
    def max_tokens_per_step(self) -> int:
        """Accepted chain (at most num_steps drafts) plus the bonus token."""
        return min(self.num_steps + 1, self.num_draft_tokens)


def spec_config(profile: Profile, args: SimServerArgs) -> SpecConfig | None:
    if not args.speculative:
        return None
    sp = profile.spec
    steps = args.speculative_num_steps or sp.default_num_steps
    topk = args.speculative_eagle_topk or sp.default_eagle_topk
    if args.speculative_num_draft_tokens:
        draft = args.speculative_num_draft_tokens
    elif args.speculative_num_steps and topk == 1:
        draft = steps + 1
    else:
        draft = sp.default_num_draft_tokens
    return SpecConfig(args.speculative_algorithm or "EAGLE3", steps, topk, draft)


def startup_failure(profile: Profile, args: SimServerArgs) -> str | None:
    """The exception a configuration dies of during start-up on this profile, or None."""
    if args.enable_flashinfer_allreduce_fusion and profile.features.flashinfer_fusion == "crash":
        return f"RuntimeError: {CRASH_MESSAGE}"
    return None


def allreduce(profile: Profile, args: SimServerArgs, nbytes: float) -> tuple[str, float]:
    """Which all-reduce implementation serves a message of ``nbytes``, and its latency in us.

    Order as in SGLang: FlashInfer fusion (if on and the message fits), then the custom
    all-reduce (where available and not disabled), then torch symmetric memory (only where the
    hardware supports it; elsewhere the flag silently falls back), then NCCL.
    """
    ar, feat = profile.allreduce_us, profile.features
    if args.enable_flashinfer_allreduce_fusion and ar.flashinfer_fused and nbytes <= profile.fused_max_bytes:
        return "flashinfer_fused", interp(ar.flashinfer_fused, nbytes)
    if (feat.custom_allreduce and not args.disable_custom_all_reduce and ar.custom
            and nbytes <= profile.custom_max_bytes):
        return "custom", interp(ar.custom, nbytes)
    if (args.enable_torch_symm_mem and feat.torch_symm_mem and ar.torch_symm_mem
            and nbytes <= profile.symm_mem_max_bytes):
        return "torch_symm_mem", interp(ar.torch_symm_mem, nbytes)
    return "nccl", interp(ar.nccl, nbytes)


def _launch_overhead(profile: Profile, args: SimServerArgs, batch: int) -> float:
    max_bs = args.cuda_graph_max_bs or DEFAULT_CUDA_GRAPH_MAX_BS
    return profile.launch_overhead_us_per_layer if (args.disable_cuda_graph or batch > max_bs) else 0.0


# --------------------------------------------------------------------------- step times (noise-free)


@dataclass(frozen=True)
class StepCost:
    """One engine step's model duration and the parts it is made of (for logs and docs)."""

    total_us: float
    per_layer_us: float
    compute_us: float
    allreduce_us: float
    allreduce_impl: str
    tokens: int


def decode_step(profile: Profile, args: SimServerArgs, batch: int) -> StepCost:
    """A decode step over ``batch`` running requests (a verify step with speculative decoding)."""
    if batch < 1:
        raise ValueError("batch must be >= 1")
    m = profile.model
    spec = spec_config(profile, args)
    tokens = batch * (spec.num_draft_tokens if spec else 1)
    if profile.twin is not None:  # a fitted twin's equations (framework.servers.sim.twin)
        es = args.engine_settings
        tokens = engines.graph_rows(es, batch) * (spec.num_draft_tokens if spec else 1)  # a graph's padding
        total = twin_steps.decode_us(profile.twin, tokens, threads=es.threads if es else None, tp=args.tp_size,
                               speculative=spec is not None, eager=engines.eager_decode(es, batch))
        total *= args.sim_decode_slowdown
        return StepCost(total, total, total, 0.0, "twin", tokens)
    comp = interp(profile.compute_us.decode, tokens)
    impl, a = allreduce(profile, args, tokens * m.bytes_per_token)
    ar = m.allreduces_per_layer * a
    saved = profile.fusion_saved_us_per_layer if impl == "flashinfer_fused" else 0.0
    launch = _launch_overhead(profile, args, batch)
    if spec is None:
        per_layer = max(comp, ar) + launch - saved  # all-reduce overlapped with compute
        total = m.num_layers * per_layer + profile.forward_overhead_us
    else:
        per_layer = comp + ar + launch - saved  # verify: latency-bound, no overlap
        draft = spec.num_steps * (profile.spec.draft_step_us + profile.spec.draft_step_us_per_extra_req * (batch - 1))
        total = m.num_layers * per_layer + profile.forward_overhead_us + draft + profile.spec.overhead_us
    total *= args.sim_decode_slowdown  # the planted-regression test knob (1.0: off)
    return StepCost(total, per_layer, comp, ar, impl, tokens)


def prefill_step(profile: Profile, args: SimServerArgs, prompt_tokens: int) -> StepCost:
    """A prefill forward over ``prompt_tokens`` (summed over the requests prefilled together)."""
    m = profile.model
    tokens = max(1, int(prompt_tokens))
    if profile.twin is not None:  # a fitted twin's equations (framework.servers.sim.twin)
        es = args.engine_settings
        total = twin_steps.prefill_us(profile.twin, tokens, threads=es.threads_batch if es else None,
                                chunk=es.prefill_chunk if es else None, tp=args.tp_size)
        return StepCost(total, total, total, 0.0, "twin", tokens)
    comp = interp(profile.compute_us.prefill, tokens)
    impl, a = allreduce(profile, args, tokens * m.bytes_per_token)
    ar = m.allreduces_per_layer * a
    saved = profile.fusion_saved_us_per_layer if impl == "flashinfer_fused" else 0.0
    per_layer = max(comp, ar) - saved
    total = m.num_layers * per_layer + profile.forward_overhead_us
    if args.speculative:
        total += profile.spec.draft_prefill_us
    return StepCost(total, per_layer, comp, ar, impl, tokens)


# --------------------------------------------------------------------------- speculative acceptance


def accept_mean(alpha: float, num_steps: int) -> float:
    """Mean tokens per verify step when each draft is accepted with prob. alpha, chain stops at the first miss."""
    return sum(alpha**i for i in range(num_steps + 1))


def accept_alpha(mean: float, num_steps: int) -> float:
    """Inverse of :func:`accept_mean` by bisection (mean clipped into the feasible range)."""
    mean = min(max(mean, 1.0), num_steps + 1.0)
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if accept_mean(mid, num_steps) < mean else (lo, mid)
    return (lo + hi) / 2


def profile_accept_mean(profile: Profile, spec: SpecConfig) -> float:
    """The profile's accept length (given at its reference step count) carried over to ``spec``."""
    alpha = accept_alpha(profile.spec.accept_length_mean, profile.spec.accept_length_ref_steps)
    return min(accept_mean(alpha, spec.num_steps), float(spec.max_tokens_per_step))


def deterministic_accepts(mean: float, step_index: int) -> int:
    """Noise-free tokens of verify step ``step_index``: a fixed pattern whose running mean is ``mean``."""
    return math.floor((step_index + 1) * mean + 1e-9) - math.floor(step_index * mean + 1e-9)


def sample_accepts(rng: np.random.Generator, alpha: float, spec: SpecConfig) -> int:
    """Random tokens of one verify step: 1 (bonus) + accepted drafts before the first rejection."""
    n = 1
    while n < spec.max_tokens_per_step and rng.random() < alpha:
        n += 1
    return n


# --------------------------------------------------------------------------- noise


@dataclass(frozen=True)
class LaunchDraw:
    """Per-launch state of the rig: a multiplicative offset on every forward and the slow flag."""

    factor: float
    slow: bool


@dataclass(frozen=True)
class RequestDraw:
    """Per-request state: time jitter and (speculative) the request's own acceptance."""

    time_factor: float
    accept_mean: float | None
    alpha: float | None


def draw_launch(profile: Profile, noise_scale: float, rng: np.random.Generator) -> LaunchDraw:
    import numpy as np

    nz = profile.noise
    offset = float(np.exp(rng.normal(0.0, nz.launch_log_sd * noise_scale))) if noise_scale > 0 else 1.0
    slow = bool(noise_scale > 0 and rng.random() < min(1.0, nz.slow_launch_prob * noise_scale))
    factor = offset * (1.0 + (nz.slow_launch_factor - 1.0) * noise_scale if slow else 1.0)
    return LaunchDraw(factor, slow)


# flags that do not make a configuration (where and how a launch runs, not what it runs)
_NOT_CONFIG = frozenset({"port", "host", "random_seed", "model_path", "api_key", "log_level", "served_model_name"})


def machine_factor(args: SimServerArgs) -> float:
    """The machine-level effect: a factor on every forward for the machine (`--sim-machine`), times one for
    this configuration on that machine, each exp(N(0, sd^2)) with sd = `--sim-machine-effect`, drawn from
    a hash of the machine id (and of the configuration's explicit flags), so the same machine is always
    as fast. The second factor makes a flag's effect differ between machines (log-sd sd * sqrt(2)), as
    the cuda-graphs speed-up did between two H200s. 1.0 when off (the default) or without a machine id."""
    import hashlib
    import json

    import numpy as np

    sd = args.sim_machine_effect
    if sd <= 0 or not args.sim_machine:
        return 1.0
    config = json.dumps({k: str(args.server_args.get(k)) for k in sorted(args.explicit) if k not in _NOT_CONFIG})

    def z(key: str) -> float:
        digest = hashlib.sha256(key.encode("utf-8")).digest()
        return float(np.random.default_rng(int.from_bytes(digest[:8], "big")).standard_normal())

    return float(np.exp(sd * z(f"machine:{args.sim_machine}") + sd * z(f"machine:{args.sim_machine}|{config}")))


def draw_request(profile: Profile, args: SimServerArgs, noise_scale: float,
                 rng: np.random.Generator) -> RequestDraw:
    import numpy as np

    nz = profile.noise
    factor = float(np.exp(rng.normal(0.0, nz.request_log_sd * noise_scale))) if noise_scale > 0 else 1.0
    spec = spec_config(profile, args)
    if spec is None:
        return RequestDraw(factor, None, None)
    ref_steps = profile.spec.accept_length_ref_steps
    ref_mean = profile.spec.accept_length_mean
    if noise_scale > 0:
        ref_mean = float(np.clip(ref_mean + rng.normal(0.0, nz.accept_length_request_sd * noise_scale),
                                 1.05, ref_steps + 0.95))
    alpha = accept_alpha(ref_mean, ref_steps)
    mean = min(accept_mean(alpha, spec.num_steps), float(spec.max_tokens_per_step))
    return RequestDraw(factor, mean, alpha)


def draw_step_factor(profile: Profile, noise_scale: float, rng: np.random.Generator) -> float:
    if noise_scale <= 0:
        return 1.0
    import numpy as np

    return float(np.exp(rng.normal(0.0, profile.noise.step_log_sd * noise_scale)))


def tokens_for_step(spec: SpecConfig | None, req: RequestDraw, noise_scale: float, step_index: int,
                    remaining: int, rng: np.random.Generator) -> int:
    """Tokens a request gains in one decode/verify step, capped by what it still may generate."""
    if spec is None:
        n = 1
    elif noise_scale > 0:
        n = sample_accepts(rng, req.alpha or 0.0, spec)
    else:
        n = deterministic_accepts(req.accept_mean or 1.0, step_index)
    return max(0, min(n, remaining))


def eos_position(profile: Profile, seed: int, temperature: float, rng: np.random.Generator | None = None) -> int:
    """The number of output tokens after which the model emits EOS (ignore_eos off): lognormal, from the
    prompt's seed when greedy (same prompt, same length), from the request's generator otherwise."""
    import numpy as np

    ol = profile.output_length
    gen = rng if (temperature > 0 and rng is not None) else np.random.default_rng(seed)
    return max(1, int(round(ol.median_tokens * math.exp(ol.log_sd * float(gen.standard_normal())))))


# --------------------------------------------------------------------------- planning


def resolve_args(server_flags: Iterable[str]) -> SimServerArgs:
    return parse_server_args(list(server_flags), require_model_path=False)


def request_log_sd(profile: Profile, server_flags: list[str], output_tokens: int, n: int = 300,
                   seed: int = 0) -> float:
    """Per-request sd of log decode tok/s under the noise model (Monte Carlo of single streams; deterministic).

    Within-launch noise for planning: request jitter, per-step jitter and, with speculative decoding,
    the per-request accept length and the per-step accepted tokens, exactly as the engine draws them.
    """
    import numpy as np

    args = resolve_args(server_flags)
    spec = spec_config(profile, args)
    step_s = decode_step(profile, args, 1).total_us / 1e6
    scale = args.sim_noise_scale
    rng = np.random.default_rng(seed)
    logs = []
    for _ in range(n):
        req = draw_request(profile, args, scale, rng)
        done, t, i = 1, 0.0, 0
        while done < output_tokens:
            done += tokens_for_step(spec, req, scale, i, output_tokens - done, rng)
            t += step_s * req.time_factor * draw_step_factor(profile, scale, rng)
            i += 1
        logs.append(math.log((output_tokens - 1) / t))
    return float(np.std(logs, ddof=1))


def batch_bias(profile: Profile, args: SimServerArgs, concurrency: int, observed_batch: float) -> float:
    """Relative step-time error of a run whose decode batch averaged ``observed_batch`` instead of the
    workload's ``concurrency`` (capped by ``--max-running-requests``): >= 0 when the batch ran emptier."""
    nominal = float(min(concurrency, args.max_running_requests or concurrency))
    observed = min(max(observed_batch, 1.0), nominal)
    return decode_step(profile, args, nominal).total_us / decode_step(profile, args, observed).total_us - 1.0


def _step_counts(mean: float, tokens: int) -> Iterable[int]:
    done, i = 0, 0
    while done < tokens:
        n = deterministic_accepts(mean, i)
        done += n
        i += 1
        yield n
