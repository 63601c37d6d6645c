"""The generated SGLang flag table: every flag parses, every flag is classified, SGLang's resolution."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from cli_helpers import ROOT

from framework.servers.sim import flags
from framework.servers.sim.args import build_parser, parse_server_args


def _value(f: dict) -> list[str]:
    if f["action"] in ("store_true", "store_false", "DeprecatedAction"):
        return []
    if f["choices"]:
        v = [str(f["choices"][0])]
    elif f["type"] == "int":
        v = ["2"]
    elif f["type"] == "float":
        v = ["0.5"]
    elif f["type"] in ("json.loads", "json_list_type"):
        v = ["[]"] if f["nargs"] is None else ["1"]
    else:
        v = ["x"]
    return v if f["nargs"] != 0 else []


def test_table_is_sglang_0_5_9_and_complete():
    t = flags.table()
    assert t["sglang_version"] == "0.5.9" and len(t["flags"]) >= 300
    dests = [f["dest"] for f in t["flags"]]
    assert len(dests) == len(set(dests))
    for must in ("chunked_prefill_size", "attention_backend", "max_running_requests", "enable_dp_attention",
                 "schedule_policy", "kv_cache_dtype", "context_length", "enable_torch_compile",
                 "disable_radix_cache", "mem_fraction_static"):
        assert must in dests


def test_every_flag_parses_with_each_of_its_option_strings():
    parser = build_parser()
    for f in flags.table()["flags"]:
        for opt in f["options"]:
            ns = vars(parser.parse_args(["--model-path", "m", opt, *_value(f)]))
            if f["action"] != "DeprecatedAction":
                assert f["dest"] in ns, opt


def test_every_flag_is_classified_exactly_once():
    c = flags.classes()
    dests = {f["dest"] for f in flags.table()["flags"]}
    modelled, no_effect, not_modelled = set(c["modelled"]), set(c["no_effect"]), set(c["not_modelled"])
    assert modelled | no_effect | not_modelled == dests
    assert not (modelled & no_effect) and not (modelled & not_modelled) and not (no_effect & not_modelled)
    assert flags.flag_class("mem_fraction_static") == "not_modelled"
    assert flags.flag_class("tp_size") == "modelled" and flags.option_name("tp_size") == "--tp-size"
    assert flags.flag_class("log_level") == "no_effect"


def test_tp_alias_and_real_tuning_flags_parse():
    a = parse_server_args(["--model-path", "m", "--tp", "8", "--chunked-prefill-size", "4096",
                           "--attention-backend", "fa3", "--max-running-requests", "32", "--enable-dp-attention",
                           "--schedule-policy", "lpm", "--kv-cache-dtype", "fp8_e4m3", "--context-length", "8192",
                           "--enable-torch-compile", "--disable-radix-cache"])
    assert a.tp_size == 8 and a.max_running_requests == 32 and a.context_length == 8192
    assert a.server_args["chunked_prefill_size"] == 4096 and a.server_args["attention_backend"] == "fa3"
    with pytest.raises(SystemExit):
        parse_server_args(["--model-path", "m", "--attention-backend", "nonsense"])


def test_topk_one_resets_draft_tokens_with_sglangs_warning():
    a = parse_server_args(["--model-path", "m", "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3",
                           "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "8"])
    assert a.speculative_algorithm == "EAGLE" and a.speculative_num_draft_tokens == 4
    assert ("speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1"
            in a.warnings)
    assert a.max_running_requests == 48 and a.server_args["disable_overlap_schedule"] is True
    assert a.server_args["speculative_draft_model_path"] == "m"  # DeepSeek-V3: the draft is the model itself


def test_derived_defaults_follow_the_profiles_gpu_memory():
    a = parse_server_args(["--model-path", "m", "--tp-size", "8"])  # RTX PRO 6000: 96 GB
    assert a.cuda_graph_max_bs == 512 and a.server_args["chunked_prefill_size"] == 8192
    assert a.mem_fraction_static == round((97887 - (512 + 8192 * 1.5 + 512 * 2 + 1024)) / 97887, 3)  # 0.848
    assert a.server_args["tokenizer_path"] == "m" and a.server_args["served_model_name"] == "m"


def test_generator_reads_a_server_args_file(tmp_path: Path):
    src = tmp_path / "server_args.py"
    src.write_text('''
import dataclasses
CHOICES = ["a", "b"]
@dataclasses.dataclass
class ServerArgs:
    model_path: str
    size: int = 10 * 2
    mode: str = CHOICES[0]
    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--model-path", "--model", type=str, required=True)
        parser.add_argument("--size", type=int, default=ServerArgs.size)
        parser.add_argument("--mode", type=str, default=ServerArgs.mode, choices=CHOICES)
        parser.add_argument("--flag", action="store_true")
''')
    spec = importlib.util.spec_from_file_location("gen", ROOT / "tools" / "gen_sglang_flags.py")
    gen = importlib.util.module_from_spec(spec)
    sys.modules["gen"] = gen
    spec.loader.exec_module(gen)
    t = gen.generate(src, "9.9")
    by = {f["dest"]: f for f in t["flags"]}
    assert by["model_path"]["options"] == ["--model-path", "--model"] and by["model_path"]["required"]
    assert by["size"]["default"] == 20 and by["mode"]["choices"] == ["a", "b"] and by["mode"]["default"] == "a"
    assert by["flag"]["action"] == "store_true" and by["flag"]["default"] is False
