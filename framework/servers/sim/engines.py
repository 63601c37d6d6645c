"""Small models of other engines' flags, for a twin fitted to that engine (llama.cpp, vLLM).

A twin profile fitted to llama-cpp-python, llama.cpp's `llama-server` or vLLM serves that engine's own
`flags:` on backend=sim. Each engine's table says, per flag, what the twin does with it: `threads`
(compute scales with the twin's thread exponent), `prefill_chunk` (a prompt is prefilled in chunks of
this many tokens, each chunk one more forward), `slots` (how many requests run at once: the engine's
`--max-running-requests`), `context` (requests longer are refused), `tp` (tensor parallelism), or
`no_effect`. Any other flag is *not modelled*: accepted and listed when every condition sets it alike,
refused before a launch when levels differ in it (as for SGLang's flags, docs/model.md). Pure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Role = Literal["threads", "threads_batch", "prefill_chunk", "prefill_chunk_cap", "slots", "context", "tp",
               "eager", "graph_max_bs", "no_effect"]

# flag -> role. llama-cpp-python's server: one request at a time (its server holds a lock per model), so
# its slots are fixed at 1; n_batch caps n_ubatch; defaults from llama_cpp.server.settings.
ENGINE_FLAGS: dict[str, dict[str, Role]] = {
    "llamacpp": {
        "--n_threads": "threads", "--n_threads_batch": "threads_batch", "--n_ubatch": "prefill_chunk",
        "--n_batch": "prefill_chunk_cap", "--n_ctx": "context", "--model": "no_effect", "--host": "no_effect",
        "--port": "no_effect", "--seed": "no_effect", "--interrupt_requests": "no_effect", "--verbose": "no_effect",
        "--model_alias": "no_effect", "--api_key": "no_effect",
    },
    "llama_server": {
        "--threads": "threads", "-t": "threads", "--threads-batch": "threads_batch", "-tb": "threads_batch",
        "--ubatch-size": "prefill_chunk", "-ub": "prefill_chunk", "--batch-size": "prefill_chunk_cap",
        "-b": "prefill_chunk_cap", "--parallel": "slots", "-np": "slots", "--ctx-size": "context", "-c": "context",
        "--model": "no_effect", "-m": "no_effect", "--host": "no_effect", "--port": "no_effect",
        "--seed": "no_effect", "--verbose": "no_effect", "--metrics": "no_effect", "--alias": "no_effect",
    },
    "vllm": {
        "--max-num-seqs": "slots", "--max-num-batched-tokens": "prefill_chunk", "--max-model-len": "context",
        "--tensor-parallel-size": "tp", "-tp": "tp", "--model": "no_effect", "--host": "no_effect",
        "--port": "no_effect", "--seed": "no_effect", "--served-model-name": "no_effect",
        "--disable-log-requests": "no_effect", "--disable-log-stats": "no_effect", "--uvicorn-log-level": "no_effect",
    },
    # the project's GPU server (framework.servers.gpu): decode steps replay CUDA graphs captured up to
    # --cuda-graph-max-bs, eager with --disable-cuda-graph or above it (`eager`, `graph_max_bs`); prompts are
    # prefilled whole (--chunked-prefill-size only pads)
    "gpu": {
        "--max-running-requests": "slots", "--context-length": "context", "--disable-cuda-graph": "eager",
        "--cuda-graph-max-bs": "graph_max_bs", "--chunked-prefill-size": "no_effect", "--host": "no_effect",
        "--port": "no_effect", "--random-seed": "no_effect", "--enable-metrics": "no_effect",
        "--log-level": "no_effect", "--served-model-name": "no_effect", "--api-key": "no_effect",
        "--mem-fraction-static": "no_effect",
    },
}
# the speculative flags an engine shares with SGLang: the sim's own parser reads them (the twin's verify step,
# its spec overhead and accept length), not the engine's table. The GPU server takes SGLang's spelling
# (--speculative-algorithm NGRAM|EAGLE..., --speculative-num-draft-tokens K); without this its speculative arm
# was "not modelled" and the twin could not fit a speculative pilot of it.
SIM_SPEC_FLAGS: dict[str, set[str]] = {
    "gpu": {"--speculative-algorithm", "--speculative-num-draft-tokens", "--speculative-num-steps",
            "--speculative-eagle-topk", "--speculative-draft-model-path"},
}
# what each engine runs when a flag is not given (None: unbounded / the twin's reference)
DEFAULTS: dict[str, dict[str, int | None]] = {
    "llamacpp": {"threads": None, "prefill_chunk": 512, "prefill_chunk_cap": 512, "slots": 1, "context": 2048},
    "llama_server": {"threads": None, "prefill_chunk": 512, "prefill_chunk_cap": 2048, "slots": 1, "context": 4096},
    "vllm": {"threads": None, "prefill_chunk": None, "slots": 256, "context": None},
    "gpu": {"threads": None, "prefill_chunk": None, "slots": 64, "context": 1024},
}
BOOLEAN_FLAGS = {"--disable-log-requests", "--disable-log-stats", "--enforce-eager", "--enable-prefix-caching",
                 "--no-enable-prefix-caching", "--metrics", "--verbose", "--trust-remote-code",
                 "--disable-cuda-graph", "--disable-overlap-schedule", "--enable-metrics",
                 "--enable-torch-symm-mem"}
FIXED_SLOTS = {"llamacpp": 1}  # llama-cpp-python serves one request at a time whatever the flags say


class EngineFlagError(ValueError):
    """An engine flag whose value the twin cannot read (e.g. `--n_threads two`)."""


@dataclass(frozen=True)
class EngineSettings:
    """What the twin reads from an engine's command line."""

    engine: str
    threads: int | None = None
    threads_batch: int | None = None
    prefill_chunk: int | None = None
    slots: int | None = None
    context: int | None = None
    tp: int | None = None
    eager: bool = False  # decode steps run without CUDA graphs (the GPU server's --disable-cuda-graph)
    graph_max_bs: int | None = None  # the largest batch a captured graph replays (None: the slots)
    not_modelled: dict[str, str] = field(default_factory=dict)  # flag -> value ("" for a switch)
    given: dict[str, str] = field(default_factory=dict)  # every engine flag on the command line -> value


def engine_takes_own_flags(engine: str) -> bool:
    return engine in ENGINE_FLAGS


def split(argv: list[str], engine: str, own: set[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """(the argv the sim parses itself, the engine's flags as (flag, value)): every token not in `own` (the sim
    row's template flags and --sim-*) belongs to the engine."""
    mine: list[str] = []
    theirs: list[tuple[str, str]] = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        name, eq, inline = tok.partition("=")
        if name in own or name.startswith("--sim-"):
            mine.append(tok)
            if not eq and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
                mine.append(argv[i + 1])
                i += 1
        elif tok.startswith("-"):
            if eq:
                theirs.append((name, inline))
            elif name not in BOOLEAN_FLAGS and i + 1 < len(argv) and not _is_flag(argv[i + 1]):
                theirs.append((name, argv[i + 1]))
                i += 1
            else:
                theirs.append((name, ""))
        else:
            mine.append(tok)
        i += 1
    return mine, theirs


def _is_flag(tok: str) -> bool:
    return tok.startswith("-") and not _number(tok)


def _number(tok: str) -> bool:
    try:
        float(tok)
    except ValueError:
        return False
    return True


def settings(engine: str, flags: list[tuple[str, str]]) -> EngineSettings:
    """The twin's reading of an engine's flags (defaults where a flag is absent)."""
    table = ENGINE_FLAGS[engine]
    values: dict[str, int] = {}
    not_modelled: dict[str, str] = {}
    for name, value in flags:
        role = table.get(name)
        if role is None:
            not_modelled[name] = value
            continue
        if role == "no_effect":
            continue
        if role == "eager":
            values[role] = 1
            continue
        try:
            values[role] = int(value)
        except ValueError:
            raise EngineFlagError(f"{name} {value!r}: an integer is required") from None
        if values[role] < 1 and role != "context":
            raise EngineFlagError(f"{name} {value}: must be >= 1")
    d = DEFAULTS[engine]
    chunk = values.get("prefill_chunk", d.get("prefill_chunk"))
    cap = values.get("prefill_chunk_cap", d.get("prefill_chunk_cap"))
    if chunk is not None and cap is not None:
        chunk = min(chunk, cap)
    elif chunk is None:
        chunk = values.get("prefill_chunk_cap")
    threads = values.get("threads", d.get("threads"))
    slots = FIXED_SLOTS.get(engine, values.get("slots", d.get("slots")))
    return EngineSettings(engine=engine, threads=threads, threads_batch=values.get("threads_batch", threads),
                          prefill_chunk=chunk, slots=slots, context=values.get("context", d.get("context")),
                          tp=values.get("tp"), eager=bool(values.get("eager")),
                          graph_max_bs=values.get("graph_max_bs"), not_modelled=not_modelled, given=dict(flags))


def graph_rows(es: EngineSettings | None, batch: int) -> int:
    """The rows a decode step of `batch` requests computes: a CUDA graph replays the smallest captured size that
    holds the batch (the GPU server's capture list, as SGLang's: 1, 2, 4, 8, then every 8 up to the largest),
    padding the rest; an eager step, and every other engine, computes the batch."""
    if es is None or es.engine != "gpu" or eager_decode(es, batch):
        return batch
    top = min(es.graph_max_bs or es.slots or batch, es.slots or batch)
    sizes = sorted({*(b for b in (1, 2, 4) if b <= top), *range(8, top + 1, 8), top})
    return next((b for b in sizes if b >= batch), batch)


def eager_decode(es: EngineSettings | None, batch: int) -> bool:
    """A decode step of `batch` requests runs without a CUDA graph (the GPU server: graphs off, or the batch above
    the largest captured size); False for every engine that captures none in the twin's model."""
    if es is None or es.engine != "gpu":
        return False
    top = es.graph_max_bs if es.graph_max_bs is not None else es.slots
    return es.eager or (top is not None and batch > min(top, es.slots or top))


def modelled(engine: str, flag: str) -> bool:
    return ENGINE_FLAGS.get(engine, {}).get(flag) not in (None, "no_effect")


def no_effect(engine: str, flag: str) -> bool:
    return ENGINE_FLAGS.get(engine, {}).get(flag) == "no_effect"
