"""A server's own counters at the end of a launch, from its Prometheus `/metrics` text (pure parsing).

SGLang (`sglang:`, with `--enable-metrics`), vLLM (`vllm:`) and llama.cpp's `llama-server`
(`llamacpp:`, with `--metrics`) expose their own view of a launch: tokens processed, requests,
KV-cache use, queue times. The runner keeps the samples with the backend's prefix in the
`launch_end` row, so a record can be cross-checked against what the server itself counted.
The text format is parsed by `prometheus_client`'s own parser (quoted label values with braces,
escapes and `# TYPE` lines are its business, not ours).
"""

from __future__ import annotations

import math

from prometheus_client.parser import text_string_to_metric_families

MAX_SAMPLES = 400  # a histogram per label set adds ~15 samples; bound what one trials row holds


def parse(text: str, prefix: str) -> dict[str, float]:
    """`{name{labels}: value}` for every finite sample whose name starts with `prefix`.

    A page the parser rejects part-way keeps the samples read before the bad line (a server's
    counters are a cross-check, never worth failing a launch over).
    """
    out: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if not s.name.startswith(prefix) or not math.isfinite(s.value):
                    continue
                labels = ",".join(f'{k}="{v}"' for k, v in s.labels.items())
                out[s.name + (f"{{{labels}}}" if labels else "")] = float(s.value)
                if len(out) >= MAX_SAMPLES:
                    return out
    except ValueError:
        pass
    return out
