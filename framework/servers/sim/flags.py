"""SGLang 0.5.9's command line, from the generated flag table, and the part of its argument
resolution that changes what runs.

``sglang_flags.json`` is generated from SGLang's ``server_args.py`` by
``tools/gen_sglang_flags.py`` (never hand-edited), so every real flag parses here with SGLang's
names, aliases, types, defaults, choices and nargs (argparse's prefix matching included: ``--tp``
is ``--tp-size``, as in SGLang). ``flag_classes.yaml`` is the reviewed classification of each flag:
modelled, no effect on performance, or not modelled. Pure functions, except the cached reads of
those two shipped files.
"""

from __future__ import annotations

import argparse
import json
import logging
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).parent
FLAGS_FILE = HERE / "sglang_flags.json"
CLASSES_FILE = HERE / "flag_classes.yaml"

log = logging.getLogger("sglang.srt.server_args")


@lru_cache(maxsize=1)
def table() -> dict[str, Any]:
    return json.loads(FLAGS_FILE.read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def classes() -> dict[str, Any]:
    return yaml.safe_load(CLASSES_FILE.read_text(encoding="utf-8"))


def sglang_version() -> str:
    return str(table()["sglang_version"])


def flag_class(dest: str) -> str:
    """'modelled', 'no_effect' or 'not_modelled' for a flag dest (or a ServerArgs field)."""
    c = classes()
    dest = field_to_dest().get(dest, dest)
    if dest in c["modelled"]:
        return "modelled"
    if dest in c["no_effect"]:
        return "no_effect"
    return "not_modelled"


@lru_cache(maxsize=1)
def field_to_dest() -> dict[str, str]:
    return {v: k for k, v in table()["cli_to_field"].items()}


def option_name(dest: str) -> str:
    """The flag as a user writes it (its last long option, e.g. --tp-size)."""
    dest = field_to_dest().get(dest, dest)
    for f in table()["flags"]:
        if f["dest"] == dest:
            longs = [o for o in f["options"] if o.startswith("--")]
            return longs[-1] if dest in table()["cli_to_field"] else longs[0]
    return "--" + dest.replace("_", "-")


# --------------------------------------------------------------------------- the parser


def _nullable_str(value: str) -> str | None:
    return None if not value or value == "None" else value


def _json_value(value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"Invalid JSON: {value}") from exc


TYPES = {"int": int, "float": float, "str": str, "json.loads": _json_value, "json_list_type": _json_value,
         "nullable_str": _nullable_str}


class DeprecatedAction(argparse.Action):
    """SGLang's action for removed flags: take no value, print its warning."""

    def __init__(self, option_strings: list[str], dest: str, nargs: int = 0, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=nargs, **kwargs)

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        log.warning(f"The command line argument '{option_string}' is deprecated and will be removed in "
                    "future versions.")


class LoRAPathAction(argparse.Action):
    """SGLang's ``--lora-paths`` action, reduced to what the sim keeps: the list of values."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, list(values or []))


ACTIONS: dict[str, Any] = {"DeprecatedAction": DeprecatedAction, "LoRAPathAction": LoRAPathAction}


def add_sglang_flags(parser: argparse.ArgumentParser) -> None:
    """Every flag of ``sglang.launch_server`` 0.5.9, as SGLang's ``ServerArgs.add_cli_args`` adds it.

    Defaults are suppressed so the namespace holds exactly what the command line set; the caller
    adds :func:`flag_defaults` beneath it."""
    for f in table()["flags"]:
        kw: dict[str, Any] = {"dest": f["dest"]}
        action = f["action"]
        if action in ACTIONS:
            kw["action"] = ACTIONS[action]
        elif action is not None:
            kw["action"] = action
        if f["type"] is not None:
            kw["type"] = TYPES[f["type"]]
        if f["nargs"] is not None:
            kw["nargs"] = f["nargs"]
        kw["default"] = argparse.SUPPRESS  # what the command line set is told apart; flag_defaults() fills in
        if f["choices"] is not None:
            kw["choices"] = f["choices"]
        if f["required"]:
            kw["required"] = True
        if "const" in f:
            kw["const"] = f["const"]
        kw["help"] = str(f.get("help") or "").replace("%", "%%") or None
        parser.add_argument(*f["options"], **kw)


# --------------------------------------------------------------------------- argument resolution


class ServerArgsError(ValueError):
    """What SGLang's ServerArgs.__post_init__ raises for this combination (the launch dies)."""


@dataclass
class Resolved:
    """The full resolved ServerArgs (SGLang's field names) and the warnings SGLang logs on the way."""

    args: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    explicit: set[str] = field(default_factory=set)  # fields the command line set


def defaults() -> dict[str, Any]:
    return dict(table()["fields"])


def resolve(parsed: dict[str, Any], gpu_memory_mib: float | None, explicit: set[str] | None = None) -> Resolved:
    """SGLang's ``from_cli_args`` + the ``__post_init__`` steps that change what runs on this model.

    Applied: the long-form parallelism dests copied into ``tp_size`` & co.; tokenizer path, served
    model name, device; chunked prefill size, CUDA-graph batch sizes and ``mem_fraction_static``
    from the GPU memory (``_handle_gpu_memory_settings``); speculative decoding
    (``_handle_speculative_decoding``: NEXTN is EAGLE, max running requests 48, overlap schedule
    off, the draft model of DeepSeek-V3 is the model itself, the auto parameters (3, 1, 4), and
    topk 1 resets the draft tokens to num_steps + 1), each with SGLang's own warning line.
    Everything else keeps the value given (or the default).
    """
    a = defaults()
    c2f = table()["cli_to_field"]
    for k, v in parsed.items():
        a[c2f.get(k, k)] = v
    explicit = {c2f.get(k, k) for k in (explicit or set())}
    warn: list[str] = []
    if str(a["model_path"]).lower() in ("none", "dummy"):
        return Resolved(a, warn, explicit)
    if a["tokenizer_path"] is None:
        a["tokenizer_path"] = a["model_path"]
    if a["served_model_name"] is None:
        a["served_model_name"] = a["model_path"]
    if a["device"] is None:
        a["device"] = "cuda"
    if a["speculative_draft_model_quantization"] is None:
        a["speculative_draft_model_quantization"] = a["quantization"]
    elif a["speculative_draft_model_quantization"] == "unquant":
        a["speculative_draft_model_quantization"] = None
    _gpu_memory_settings(a, gpu_memory_mib)
    if a["page_size"] is None:
        a["page_size"] = 1
    _speculative(a, warn)
    return Resolved(a, warn, explicit)


def _gpu_memory_settings(a: dict[str, Any], gpu_mem: float | None) -> None:
    tp = a["tp_size"]
    if gpu_mem is None:
        cps, bs = 4096, 160
    elif gpu_mem < 20 * 1024:
        cps, bs = 2048, 8
    elif gpu_mem < 35 * 1024:
        cps, bs = 2048, (24 if tp < 4 else 80)
    elif gpu_mem < 60 * 1024:
        cps, bs = 4096, (32 if tp < 4 else 160)
    elif gpu_mem < 160 * 1024:
        cps, bs = 8192, (256 if tp < 4 else 512)
    else:
        cps, bs = 16384, 512
    if a["chunked_prefill_size"] is None:
        a["chunked_prefill_size"] = cps
    if a["cuda_graph_max_bs"] is None:
        a["cuda_graph_max_bs"] = bs
    if a["cuda_graph_bs"] is None:
        m = a["cuda_graph_max_bs"]
        if a["disable_cuda_graph_padding"]:
            sizes = list(range(1, m + 1))
        elif a["speculative_algorithm"] is None:
            sizes = [1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 512, 16)) + list(range(512, m + 1, 32))
        else:
            sizes = (list(range(1, 9)) + list(range(10, 33, 2)) + list(range(40, 65, 4)) + list(range(72, 257, 8))
                     + list(range(272, m + 1, 16)))
        a["cuda_graph_bs"] = [s for s in sizes if s <= m]
    else:
        a["cuda_graph_max_bs"] = max(a["cuda_graph_bs"])
    if a["mem_fraction_static"] is None:
        reserved = 512.0
        cp = a["chunked_prefill_size"]
        reserved += max(cp if cp > 0 else (a["max_prefill_tokens"] or 0), 2048) * 1.5
        reserved += a["cuda_graph_max_bs"] * 2
        reserved += a["tp_size"] * a["pp_size"] / 8 * 1024
        if a["enable_dp_attention"]:
            reserved += a["cuda_graph_max_bs"] * a["dp_size"] * 3
            if a["cuda_graph_max_bs"] > 300:
                reserved += a["cuda_graph_max_bs"] * a["dp_size"] * 1.5
        if gpu_mem is not None and gpu_mem > 60 * 1024:
            reserved = max(reserved, 10 * 1024)
        if a["speculative_algorithm"] is not None:
            if a["speculative_algorithm"] == "STANDALONE":
                reserved += 6 * 1024
            elif a["speculative_algorithm"] != "NGRAM":
                reserved += 2 * 1024
        a["mem_fraction_static"] = round((gpu_mem - reserved) / gpu_mem, 3) if gpu_mem else 0.88


def _speculative(a: dict[str, Any], warn: list[str]) -> None:
    if a["speculative_draft_model_path"] is not None and a["speculative_draft_model_revision"] is None:
        a["speculative_draft_model_revision"] = "main"
    if a["speculative_moe_runner_backend"] is None:
        a["speculative_moe_runner_backend"] = ("auto" if a["moe_runner_backend"] == "flashinfer_trtllm"
                                               else a["moe_runner_backend"])
    if a["speculative_algorithm"] == "NEXTN":
        a["speculative_algorithm"] = "EAGLE"
    algo = a["speculative_algorithm"]
    if algo in ("EAGLE", "EAGLE3", "STANDALONE"):
        if algo == "STANDALONE" and a["enable_dp_attention"]:
            raise ServerArgsError("Currently standalone speculative decoding does not support dp attention.")
        if a["max_running_requests"] is None:
            a["max_running_requests"] = 48
            warn.append("Max running requests is reset to 48 for speculative decoding. You can override this by "
                        "explicitly setting --max-running-requests.")
        a["disable_overlap_schedule"] = True
        warn.append("Overlap scheduler is disabled when spec v2 is off or using unsupported speculative algorithm. "
                    "You can set env SGLANG_ENABLE_SPEC_V2=True to enable the experimental overlap scheduler. ")
        if a["enable_mixed_chunk"]:
            a["enable_mixed_chunk"] = False
            warn.append("Mixed chunked prefill is disabled because of using eagle speculative decoding.")
        if a["speculative_draft_model_path"] is None:
            a["speculative_draft_model_path"] = a["model_path"]
            a["speculative_draft_model_revision"] = a["revision"]
        else:
            warn.append("DeepSeek MTP does not require setting speculative_draft_model_path.")
        if a["speculative_num_steps"] is None:
            if a["speculative_eagle_topk"] is not None or a["speculative_num_draft_tokens"] is not None:
                raise ServerArgsError("AssertionError (server_args.py, _handle_speculative_decoding): "
                                      "--speculative-eagle-topk / --speculative-num-draft-tokens need "
                                      "--speculative-num-steps")
            a["speculative_num_steps"], a["speculative_eagle_topk"], a["speculative_num_draft_tokens"] = 3, 1, 4
        if a["speculative_eagle_topk"] is None:  # SGLang 0.5.9 compares None > 1 below and dies
            raise ServerArgsError("TypeError: '>' not supported between instances of 'NoneType' and 'int' "
                                  "(--speculative-num-steps without --speculative-eagle-topk)")
        if "trtllm_mha" in (a["attention_backend"], a["decode_attention_backend"], a["prefill_attention_backend"]):
            if a["speculative_eagle_topk"] > 1:
                raise ServerArgsError("trtllm_mha backend only supports topk = 1 for speculative decoding.")
        if a["speculative_eagle_topk"] == 1 and a["speculative_num_draft_tokens"] != a["speculative_num_steps"] + 1:
            warn.append("speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
                        "speculative_eagle_topk == 1")
            a["speculative_num_draft_tokens"] = a["speculative_num_steps"] + 1
        if (a["speculative_eagle_topk"] > 1 and a["page_size"] is not None and a["page_size"] > 1
                and a["attention_backend"] not in ("flashinfer", "fa3")):
            raise ServerArgsError("speculative_eagle_topk > 1 with page_size > 1 is unstable and produces incorrect "
                                  "results for paged attention backends. This combination is only supported for "
                                  "the 'flashinfer' backend.")
    if algo == "NGRAM":
        if a["max_running_requests"] is None:
            a["max_running_requests"] = 48
            warn.append("Max running requests is reset to 48 for speculative decoding. You can override this by "
                        "explicitly setting --max-running-requests.")
        a["disable_overlap_schedule"] = True
        a["enable_mixed_chunk"] = False
        a["speculative_eagle_topk"] = a["speculative_ngram_max_bfs_breadth"]
        if a["speculative_num_draft_tokens"] is None:
            a["speculative_num_draft_tokens"] = a["speculative_ngram_max_match_window_size"]
        warn.append("The overlap scheduler and mixed chunked prefill are disabled because of using ngram "
                    "speculative decoding.")


def flag_defaults() -> dict[str, Any]:
    """argparse's default of every flag (by dest), as SGLang's parser has them."""
    return {f["dest"]: f["default"] for f in table()["flags"] if f["action"] != "DeprecatedAction"}
