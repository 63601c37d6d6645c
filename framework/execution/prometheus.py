"""A server's own counters at the end of a launch, from its Prometheus `/metrics` text (pure parsing).

SGLang (`sglang:`, with `--enable-metrics`), vLLM (`vllm:`) and llama.cpp's `llama-server`
(`llamacpp:`, with `--metrics`) expose their own view of a launch: tokens processed, requests,
KV-cache use, queue times. The runner keeps the samples with the backend's prefix in the
`launch_end` row, so a record can be cross-checked against what the server itself counted.
"""

from __future__ import annotations

import math
import re

MAX_SAMPLES = 400  # a histogram per label set adds ~15 samples; bound what one trials row holds

_SAMPLE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?P<labels>\{[^}]*\})?\s+(?P<value>\S+)")


def parse(text: str, prefix: str) -> dict[str, float]:
    """`{name{labels}: value}` for every sample whose name starts with `prefix` (comments skipped)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith(prefix):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        try:
            value = float(m.group("value"))
        except ValueError:
            continue
        if not math.isfinite(value):
            continue
        out[m.group("name") + (m.group("labels") or "")] = value
        if len(out) >= MAX_SAMPLES:
            break
    return out
