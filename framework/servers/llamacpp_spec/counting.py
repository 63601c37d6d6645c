"""Counting what prompt lookup drafted and what the target kept, from `Llama.generate`'s own calls.

In `Llama.generate` (llama-cpp-python 0.3.36) the draft model is called with the sequence so far, its last
token the one just sampled (length L_i), and proposes k_i tokens for positions L_i, L_i + 1, ...; the target
evaluates them in one batch and keeps the a_i it agrees with, then samples one more (the token at the first
mismatch, or a bonus token after all k_i). So a_i is the length of the common prefix of the proposal and the
tokens the request emitted from position L_i on (the emitted token j sits at position P + j, P prompt tokens):
L_{i+1} - L_i - 1 for every call but the last, and for the last exactly what a stop left of it. Evaluations
are the target's forward calls (`Llama.eval`; one call may hold several llama.cpp batches): one for the
prompt, then one per verify step or plain decode step.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

NAMES = ("requests", "generated_tokens", "target_evals", "draft_calls", "drafted_tokens", "accepted_tokens")
PREFIX = "llamacpp_spec:"


@dataclass
class Request:
    """One generation's calls: (L_i, k_i) per draft call, tokens emitted, target evaluations."""

    prompt: int
    calls: list[tuple[int, list[int]]] = field(default_factory=list)  # (L_i, the proposal)
    tokens: list[int] = field(default_factory=list)  # emitted, in order
    evals: int = 0

    def accepted(self) -> int:
        total = 0
        for length, proposal in self.calls:
            start = length - self.prompt
            for drafted, kept in zip(proposal, self.tokens[max(0, start):], strict=False):
                if start < 0 or drafted != kept:
                    break
                total += 1
        return total


class Counters:
    """Totals over the server's life (one request at a time: llama-cpp-python's server holds a lock per model)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.totals = dict.fromkeys(NAMES, 0)
        self.current: Request | None = None

    def start(self, prompt_tokens: int) -> None:
        self.current = Request(prompt_tokens)

    def proposal(self, length: int, proposal: Any) -> None:
        if self.current is not None:
            self.current.calls.append((int(length), [int(t) for t in proposal]))

    def evaluated(self) -> None:
        if self.current is not None:
            self.current.evals += 1

    def emitted(self, token: int) -> None:
        if self.current is not None:
            self.current.tokens.append(int(token))

    def end(self) -> None:
        r, self.current = self.current, None
        if r is None:
            return
        with self.lock:
            t = self.totals
            t["requests"] += 1
            t["generated_tokens"] += len(r.tokens)
            t["target_evals"] += r.evals
            t["draft_calls"] += len(r.calls)
            t["drafted_tokens"] += sum(len(p) for _, p in r.calls)
            t["accepted_tokens"] += r.accepted()

    def prometheus(self) -> str:
        with self.lock:
            lines = []
            for name in NAMES:
                lines += [f"# TYPE {PREFIX}{name}_total counter", f"{PREFIX}{name}_total {self.totals[name]}"]
            return "\n".join(lines) + "\n"


COUNTERS = Counters()


def install(counters: Counters = COUNTERS) -> None:
    """Wrap llama-cpp-python's prompt lookup, `Llama.generate` and `Llama.eval` so that they count."""
    import llama_cpp.llama as llama_mod
    import llama_cpp.llama_speculative as spec

    base = spec.LlamaPromptLookupDecoding
    if getattr(base, "_framework_counting", False):
        return

    class CountingPromptLookup(base):  # type: ignore[misc, valid-type]
        _framework_counting = True

        def __call__(self, input_ids: Any, /, **kwargs: Any) -> Any:
            out = super().__call__(input_ids, **kwargs)
            counters.proposal(len(input_ids), out)
            return out

    spec.LlamaPromptLookupDecoding = CountingPromptLookup
    generate, evaluate = llama_mod.Llama.generate, llama_mod.Llama.eval

    def counted_generate(self: Any, tokens: Any, *args: Any, **kwargs: Any) -> Any:
        counters.start(len(tokens))
        inner = generate(self, tokens, *args, **kwargs)
        try:
            sent = None
            while True:
                token = inner.send(sent)
                counters.emitted(token)
                sent = yield token
        except StopIteration:
            return
        finally:
            inner.close()
            counters.end()

    def counted_eval(self: Any, tokens: Any) -> Any:
        counters.evaluated()
        return evaluate(self, tokens)

    llama_mod.Llama.generate = counted_generate
    llama_mod.Llama.eval = counted_eval
