"""A fitted twin's step equations (docs/model.md, "Twin"): what the sim's model calls in place of its tables.

    decode/verify step over T tokens = (d0 + d1 (T - 1)) s_thr + a T [tp > 1] + o_spec [speculative]
                                       + e [eager: the GPU server's step without a CUDA graph]
    prefill of P tokens              = (p0 + p1 P + p_c (ceil(P / chunk) - 1)) s_thr_batch + a P [tp > 1]
    s_thr = (threads / reference_threads) ** -thread_exponent

Its own module, below the model, so the model reads them without reaching the launch replay above it
(framework.servers.sim.twin). Pure.
"""

from __future__ import annotations

import math

from framework.core.twin import TwinFit


def _thread_scale(fit: TwinFit, threads: int | None) -> float:
    ref = fit.reference_threads
    if threads is None or ref is None or threads == ref:
        return 1.0
    return (threads / ref) ** -fit.value("thread_exponent")


def decode_us(fit: TwinFit, tokens: int, *, threads: int | None, tp: int, speculative: bool,
              eager: bool = False) -> float:
    d = (fit.value("decode_step_us") + fit.value("decode_us_per_token") * (tokens - 1)) * _thread_scale(fit, threads)
    if tp > 1:
        d += fit.value("allreduce_us_per_token") * tokens
    # a step without a graph launches each kernel from the host: a cost per step, not per token
    return d + (fit.value("spec_overhead_us") if speculative else 0.0) + (fit.value("eager_step_us") if eager else 0.0)


def prefill_us(fit: TwinFit, tokens: int, *, threads: int | None, chunk: int | None, tp: int) -> float:
    chunks = math.ceil(tokens / chunk) if chunk else 1
    p = (fit.value("prefill_base_us") + fit.value("prefill_us_per_token") * tokens
         + fit.value("prefill_chunk_us") * (chunks - 1)) * _thread_scale(fit, threads)
    return p + (fit.value("allreduce_us_per_token") * tokens if tp > 1 else 0.0)
