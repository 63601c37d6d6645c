"""The backend table builds the argv and environment each upstream server documents.

The flag names below were read from the upstream sources: vLLM's `vllm/engine/arg_utils.py` and
`vllm/entrypoints/openai/cli_args.py` (`--model`, `--tensor-parallel-size`, `--seed`, `--host`,
`--port`, `VLLM_API_KEY`), llama-cpp-python 0.3.36's `llama_cpp/server/settings.py` and
`__main__.py` (one `--<field>` per settings field; `HOST`/`PORT` read from the environment win over
the flags), SGLang's `server_args.py` (`--model-path`, `--tp-size`, `--random-seed`) and llama.cpp's
`common/arg.cpp` (`--model`, `--seed`, `LLAMA_ARG_*`). Where the real package is installed, the
test also checks against its own parser.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from framework.core import design
from framework.core.spec import Experiment, Hypothesis
from framework.execution.backends import (
    BACKENDS,
    LLAMA_CPP_SETTINGS,
    BackendConfigError,
    BackendSettings,
    check,
    server_spec,
)
from framework.execution.launcher import server_environ

EXP = Experiment(name="e", model_path="/models/tiny.gguf", tp_size=1, server_args=["--n_ctx", "256"])
H = Hypothesis.model_validate({
    "name": "h", "statement": "s", "experiment": "e",
    "factors": {"threads": {"reference": "one", "levels": {
        "one": {"server_args": ["--n_threads", "1"], "env": {"OMP_NUM_THREADS": "1"}},
        "two": {"server_args": ["--n_threads", "2"]}}}},
    "predictions": [{"id": "p", "kind": "increase", "factor": "threads", "level": "two"}],
})
COND = design.conditions(H)[0]


def spec_for(settings: dict, exp: Experiment = EXP):
    backend = BackendSettings.model_validate(settings)
    if backend.table.flags:  # each backend with the flag names it takes
        exp = exp.model_copy(update={"flags": backend.table.flags})
    return server_spec(backend, exp, H, COND, port=18123, seed=7, log_path=Path("x.log"))


def flag_value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_every_row_is_data_with_a_health_route_and_a_protocol():
    for name, row in BACKENDS.items():
        assert row.name == name and row.health_path.startswith("/") and row.protocol in ("sglang", "openai")
        assert all(cls and rx for cls, rx in row.failure_patterns)
    assert set(BACKENDS) == set(BackendSettings.model_fields["name"].annotation.__args__)


def test_vllm_argv_uses_vllms_flag_names_and_keeps_the_key_out_of_argv():
    s = spec_for({"name": "vllm", "python": "/venv/bin/python", "api_key": "k-123"},
                 Experiment(name="e", model_path="meta/Llama", tp_size=8))
    assert s.argv[:3] == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert flag_value(s.argv, "--model") == "meta/Llama"
    assert flag_value(s.argv, "--tensor-parallel-size") == "8"
    assert flag_value(s.argv, "--seed") == "7" and flag_value(s.argv, "--port") == "18123"
    assert flag_value(s.argv, "--host") == "127.0.0.1"
    assert s.health_path == "/health"
    assert s.env["VLLM_API_KEY"] == "k-123" and "k-123" not in s.argv


def test_vllm_serve_form_through_an_argv_template():
    s = spec_for({"name": "vllm", "argv": ["vllm", "serve", "{model}", "--port", "{port}", "--seed", "{seed}"]})
    assert s.argv[:5] == ["vllm", "serve", "/models/tiny.gguf", "--port", "18123"]


def test_llamacpp_argv_env_and_readiness():
    s = spec_for({"name": "llamacpp"})
    assert s.argv[1:3] == ["-m", "llama_cpp.server"]
    assert flag_value(s.argv, "--model") == "/models/tiny.gguf" and flag_value(s.argv, "--port") == "18123"
    # requests queue instead of cutting the stream in progress; experiment then level flags follow
    assert flag_value(s.argv, "--interrupt_requests") == "False"
    assert s.argv[-4:] == ["--n_ctx", "256", "--n_threads", "1"]
    assert s.env == {"OMP_NUM_THREADS": "1"}
    assert s.health_path == "/v1/models"
    # HOST/PORT (and every other settings field, in any case) from the user's shell never reach it
    env = server_environ({"PORT": "9", "host": "0.0.0.0", "N_THREADS": "8", "PATH": "/bin"}, s.env_unset)
    assert env == {"PATH": "/bin"}
    assert spec_for({"name": "llamacpp", "default_args": []}).argv.count("--interrupt_requests") == 0


def test_llamacpp_api_key_goes_through_the_environment():
    s = spec_for({"name": "llamacpp", "api_key": "k-9"})
    assert s.env["API_KEY"] == "k-9" and "k-9" not in s.argv


def test_llama_server_binary_and_env_prefix():
    s = spec_for({"name": "llama_server", "binary": "/opt/llama.cpp/llama-server"})
    assert s.argv[0] == "/opt/llama.cpp/llama-server" and flag_value(s.argv, "--model") == "/models/tiny.gguf"
    assert s.health_path == "/health"
    env = {"LLAMA_ARG_PORT": "1", "LLAMA_ARG_THREADS": "4", "HOME": "/h"}
    assert server_environ(env, s.env_unset) == {"HOME": "/h"}


def test_command_backend_fills_the_template():
    s = spec_for({"name": "command", "argv": ["my-server", "--listen", "{host}:{port}", "-m", "{model}"],
                  "health_path": "/v1/models"})
    assert s.argv[:5] == ["my-server", "--listen", "127.0.0.1:18123", "-m", "/models/tiny.gguf"]
    assert s.health_path == "/v1/models"
    assert BackendSettings(name="command", argv=["x", "{port}"]).effective_protocol == "openai"


def test_command_backend_drops_the_variables_that_would_override_its_flags():
    s = spec_for({"name": "command", "argv": ["my-server", "--port", "{port}"]})
    inherited = {"PORT": "9", "host": "0.0.0.0", "UVICORN_PORT": "9", "LLAMA_ARG_PORT": "9", "N_CTX": "8",
                 "PATH": "/bin", "VLLM_CPU_KVCACHE_SPACE": "1"}
    assert server_environ(inherited, s.env_unset) == {"PATH": "/bin", "VLLM_CPU_KVCACHE_SPACE": "1"}
    assert BACKENDS["command"].info_paths == ("/version",)  # vLLM's version route, for the record's server_version


def test_sglang_rows_ask_the_current_info_route_before_the_deprecated_one():
    for name in ("sim", "gpu", "sglang", "endpoint"):
        assert BACKENDS[name].info_paths == ("/server_info", "/get_server_info"), name


@pytest.mark.parametrize("settings, field, words", [
    ({"name": "command"}, "backend.argv", "needs an argv template"),
    ({"name": "command", "argv": ["srv", "{host}"]}, "backend.argv", "{port}"),
    ({"name": "command", "argv": ["srv", "{prot}"]}, "backend.argv", "unknown placeholder {prot}"),
    ({"name": "command", "argv": ["srv", "{port"]}, "backend.argv", "literal braces"),
    ({"name": "llamacpp"}, "backend", "tp_size"),
])
def test_bad_templates_are_refused_before_a_launch(settings, field, words):
    exp = Experiment(name="e", model_path="m", tp_size=2, flags="llamacpp")
    with pytest.raises(BackendConfigError) as info:
        check(BackendSettings.model_validate(settings), exp)
    assert info.value.field == field and words in info.value.message


def test_sim_and_sglang_keep_sglangs_flags():
    s = spec_for({"name": "sglang", "python": "/sgl/bin/python"}, Experiment(name="e", model_path="m", tp_size=8))
    assert s.argv[:3] == ["/sgl/bin/python", "-m", "sglang.launch_server"]
    assert flag_value(s.argv, "--model-path") == "m" and flag_value(s.argv, "--tp-size") == "8"
    assert flag_value(s.argv, "--random-seed") == "7"
    sim = spec_for({"name": "sim", "speedup": 20}, Experiment(name="e", model_path="m", tp_size=8))
    assert flag_value(sim.argv, "--sim-speedup") == "20.0" and "--sim-speedup" not in s.argv


def test_llamacpp_flag_names_match_the_installed_parser():
    """Against llama-cpp-python's own settings models, when it is installed."""
    settings = pytest.importorskip("llama_cpp.server.settings", reason="llama-cpp-python[server] not installed")
    fields = {name.upper() for name in settings.Settings.model_fields} | {"CONFIG_FILE"}
    assert fields == set(LLAMA_CPP_SETTINGS)
    argv = spec_for({"name": "llamacpp"}).argv
    flags = {a[2:] for a in argv if a.startswith("--")}
    assert flags <= set(settings.Settings.model_fields)


def test_an_experiment_runs_only_on_backends_that_take_its_flag_names():
    llama = Experiment(name="tiny", model_path="m.gguf", flags="llamacpp")
    check(BackendSettings(name="llamacpp"), llama)
    check(BackendSettings(name="command", argv=["srv", "{port}"]), llama)  # nothing parsed: any flags
    for name in ("sim", "sglang", "vllm"):
        with pytest.raises(BackendConfigError, match="llamacpp's flag names"):
            check(BackendSettings(name=name), llama)
    with pytest.raises(BackendConfigError, match="use sim or sglang"):
        check(BackendSettings(name="llamacpp"), Experiment(name="e", model_path="m"))
