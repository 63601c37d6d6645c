"""Backends as one table of data: what to start, how to tell it is ready, how to talk to it, how it fails.

A row of `BACKENDS` says, for one server kind: the argv template (placeholders `{python}`,
`{module}`, `{binary}`, `{model}`, `{tp}`, `{host}`, `{port}`, `{seed}`), flags it always gets,
the readiness route, the protocol the client speaks (`sglang`: native `/generate`; `openai`:
`/v1/completions`), where it takes an API key, environment variables that would silently override
its flags, its failure patterns (`framework.execution.failures`), where its version comes from and
which routes report metrics and server info.

`server_spec` turns (settings, experiment, hypothesis condition, port, seed) into the argv and
environment the one launcher runs; no code path depends on the backend's name beyond the table.
A user's `backend.argv` replaces the row's template (the `command` backend has no other), so
`vllm serve {model} ...` works as well as `python -m vllm.entrypoints.openai.api_server`.
"""

from __future__ import annotations

import ipaddress
import string
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from framework.core import design
from framework.core.spec import Arg, Experiment, Hypothesis
from framework.errors import BackendConfigError
from framework.execution.failures import Patterns
from framework.execution.launcher import ServerSpec

Protocol = Literal["sglang", "openai"]
BackendName = Literal["sim", "gpu", "sglang", "endpoint", "vllm", "llamacpp", "llamacpp_spec", "llama_server",
                      "command", "schedule"]
PLACEHOLDERS = ("python", "module", "binary", "model", "tp", "host", "port", "seed")


@dataclass(frozen=True)
class Backend:
    """One row of the backend table (see the module docstring)."""

    name: str
    argv: tuple[str, ...]  # template; empty: the user must give backend.argv (command) or nothing starts
    health_path: str
    protocol: Protocol
    starts_server: bool = True
    simulated: bool = False  # the embedded simulator: its figures come from a model (sim flags, clock, coverage)
    adapter: str | None = None  # module the run path loads lazily for the model's honesty checks (execution.adapters)
    flags: str | None = None  # whose flag names it takes (an experiment's `flags`); None: any (nothing parsed)
    module: str | None = None  # default for {module}
    binary: str | None = None  # default for {binary}
    default_args: tuple[str, ...] = ()  # always passed, before the experiment's and the hypothesis's flags
    api_key_env: str | None = None  # the server reads its API key from this variable (kept out of argv)
    api_key_args: tuple[str, ...] = ()  # else this flag template with {api_key}
    env_unset: tuple[str, ...] = ()  # variables removed from the server's environment; `X*` is a prefix
    failure_patterns: Patterns = ()
    version_package: str | None = None  # import name (or distribution) whose installed distribution gives the version
    version_argv: tuple[str, ...] = ()  # else this command (a template) prints it
    build_info_argv: tuple[str, ...] = ()  # a command (template) printing build flags / system info
    metrics_path: str | None = None
    metrics_prefix: str = ""  # Prometheus names of the server's own counters, kept at the end of a launch
    info_paths: tuple[str, ...] = ()  # routes that return the server's own description (JSON)
    notes: str = ""


# Settings that llama-cpp-python's server reads from the environment (pydantic-settings, any case):
# each would change the server's behaviour without a flag. HOST and PORT even beat --host/--port
# (its __main__ passes os.getenv("HOST", ...) to uvicorn) and CONFIG_FILE beats every flag.
LLAMA_CPP_SETTINGS = (
    "HOST", "PORT", "CONFIG_FILE", "MODEL", "MODEL_ALIAS", "N_GPU_LAYERS", "SPLIT_MODE", "MAIN_GPU", "TENSOR_SPLIT",
    "VOCAB_ONLY", "USE_MMAP", "USE_MLOCK", "KV_OVERRIDES", "RPC_SERVERS", "SEED", "N_CTX", "N_BATCH", "N_UBATCH",
    "N_THREADS", "N_THREADS_BATCH", "ROPE_SCALING_TYPE", "ROPE_FREQ_BASE", "ROPE_FREQ_SCALE", "YARN_EXT_FACTOR",
    "YARN_ATTN_FACTOR", "YARN_BETA_FAST", "YARN_BETA_SLOW", "YARN_ORIG_CTX", "MUL_MAT_Q", "LOGITS_ALL", "EMBEDDING",
    "OFFLOAD_KQV", "FLASH_ATTN", "LAST_N_TOKENS_SIZE", "LORA_BASE", "LORA_PATH", "NUMA", "CHAT_FORMAT",
    "CHAT_TEMPLATE_KWARGS", "CLIP_MODEL_PATH", "CACHE", "CACHE_TYPE", "CACHE_SIZE", "HF_TOKENIZER_CONFIG_PATH",
    "HF_PRETRAINED_MODEL_NAME_OR_PATH", "HF_MODEL_REPO_ID", "DRAFT_MODEL", "DRAFT_MODEL_NUM_PRED_TOKENS", "TYPE_K",
    "TYPE_V", "VERBOSE", "SSL_KEYFILE", "SSL_CERTFILE", "API_KEY", "INTERRUPT_REQUESTS", "DISABLE_PING_EVENTS",
    "ROOT_PATH",
)

# Variables that would override flags of servers commonly run as `backend=command` (llama-cpp-python's
# settings, llama-server's LLAMA_ARG_*, uvicorn's UVICORN_* options): an inherited PORT made such a
# server bind the caller's port while the framework waited on its own. backend.env still sets any of them.
COMMAND_ENV_UNSET = (*LLAMA_CPP_SETTINGS, "LLAMA_ARG_*", "UVICORN_*")

# SGLang's current route first; /get_server_info is deprecated (0.5.9 logs a warning per call) but older
# releases have only it.
SGLANG_INFO_PATHS = ("/server_info", "/get_server_info")

_PY_SERVER = ("{python}", "-m", "{module}")
_SGLANG_ARGV = (*_PY_SERVER, "--model-path", "{model}", "--tp-size", "{tp}", "--host", "{host}", "--port", "{port}",
                "--random-seed", "{seed}")
_SGLANG_PATTERNS: Patterns = (
    ("cuda_mismatch", r"No supported CUDA architectures found|sgl_kernel.*(not compatible|undefined symbol)"),
    # not on the server_args=ServerArgs(...) line every SGLang start logs (it names mem_fraction_static too)
    ("out_of_memory", r"^(?!.*ServerArgs\().*(?:Not enough memory|mem_fraction_static|KV cache pool)"),
)

# llama-cpp-python's server: one row, and the counting server's row is it with four fields replaced
_LLAMACPP = Backend(
    name="llamacpp", flags="llamacpp",
    argv=(*_PY_SERVER, "--model", "{model}", "--host", "{host}", "--port", "{port}", "--seed", "{seed}"),
    module="llama_cpp.server", health_path="/v1/models", protocol="openai",
    # Upstream's default (True) makes a new request silently end the stream in progress with
    # [DONE] and no error; False queues requests, so concurrent streams are all measured whole.
    default_args=("--interrupt_requests", "False"),
    api_key_env="API_KEY", env_unset=LLAMA_CPP_SETTINGS,
    failure_patterns=(
        ("model_not_found", r"Model path does not exist"),
        ("model_corrupt", r"gguf_init_from_\w+: (invalid|failed)|llama_model_load: error|"
                          r"Failed to load model from file|failed to load model"),
        ("bad_value", r"validation errors? for Settings"),
    ),
    version_package="llama_cpp_python", info_paths=("/v1/models",),
    build_info_argv=("{python}", "-c", "import llama_cpp; print(llama_cpp.llama_print_system_info().decode())"),
    # prompt-lookup speculative decoding is a level's flags: --draft_model prompt-lookup-decoding
    # --draft_model_num_pred_tokens N (docs/backends.md; no drafted/accepted counts are reported)
    notes="python -m llama_cpp.server (llama-cpp-python); no /health, ready when GET /v1/models is 200; "
          "prompt lookup: --draft_model prompt-lookup-decoding")


BACKENDS: dict[str, Backend] = {
    "sim": Backend(
        name="sim", argv=_SGLANG_ARGV, simulated=True, flags="sglang", module="framework.servers.sim",
        health_path="/health", protocol="sglang",
        adapter="framework.servers.sim.adapter",
        api_key_env="SIM_API_KEY", failure_patterns=_SGLANG_PATTERNS, version_package="framework",
        metrics_path="/metrics", metrics_prefix="sglang:", info_paths=SGLANG_INFO_PATHS,
        notes="the embedded simulated SGLang server; SGLang's flags plus --sim-*"),
    "gpu": Backend(
        name="gpu", argv=_SGLANG_ARGV, flags="gpu", module="framework.servers.gpu", health_path="/health",
        protocol="sglang",
        api_key_args=("--api-key", "{api_key}"),
        failure_patterns=(
            ("out_of_memory", r"CUDA out of memory|OutOfMemoryError"),
            ("bad_value", r"needs \d+ GPUs; \d+ visible|not divisible by tp_size|unknown model"),
        ),
        version_package="framework", metrics_path="/metrics", info_paths=SGLANG_INFO_PATHS,
        notes="the project's torch GPU server (framework.servers.gpu): SGLang's flags and API, random weights"),
    "sglang": Backend(
        name="sglang", argv=_SGLANG_ARGV, flags="sglang", module="sglang.launch_server", health_path="/health",
        protocol="sglang",
        api_key_args=("--api-key", "{api_key}"),  # SGLang takes it only as a flag (docs/backends.md)
        failure_patterns=_SGLANG_PATTERNS, version_package="sglang",
        metrics_path="/metrics", metrics_prefix="sglang:", info_paths=SGLANG_INFO_PATHS,
        notes="python -m sglang.launch_server; /metrics needs --enable-metrics"),
    "endpoint": Backend(
        name="endpoint", argv=(), starts_server=False, health_path="/health", protocol="sglang",
        info_paths=SGLANG_INFO_PATHS,
        notes="a server the user started; nothing is launched or stopped"),
    "vllm": Backend(
        name="vllm", flags="vllm",
        argv=(*_PY_SERVER, "--model", "{model}", "--tensor-parallel-size", "{tp}", "--host", "{host}",
              "--port", "{port}", "--seed", "{seed}"),
        module="vllm.entrypoints.openai.api_server", health_path="/health", protocol="openai",
        api_key_env="VLLM_API_KEY",
        failure_patterns=(
            ("out_of_memory", r"No available memory for the cache blocks|larger than the available KV cache memory|"
                              r"Try increasing `gpu_memory_utilization`"),
            ("model_corrupt", r"Model architectures? .* (are|is) not supported|Cannot find model module"),
            ("model_not_found", r"is not a local folder and is not a valid model identifier|Invalid repository ID"),
        ),
        version_package="vllm", metrics_path="/metrics", metrics_prefix="vllm:", info_paths=("/version",),
        notes="python -m vllm.entrypoints.openai.api_server, or backend.argv=[vllm,serve,{model},...]"),
    "llamacpp": _LLAMACPP,
    # the same server with prompt lookup's drafted and accepted tokens counted (framework.servers.llamacpp_spec)
    "llamacpp_spec": replace(
        _LLAMACPP, name="llamacpp_spec", module="framework.servers.llamacpp_spec",
        metrics_path="/metrics", metrics_prefix="llamacpp_spec:",
        notes="llama-cpp-python's server with prompt lookup's drafted and accepted tokens counted on /metrics "
              "(framework.servers.llamacpp_spec); the llamacpp row's flags"),
    "llama_server": Backend(
        name="llama_server", flags="llama_server",
        argv=("{binary}", "--model", "{model}", "--host", "{host}", "--port", "{port}", "--seed", "{seed}"),
        binary="llama-server", health_path="/health", protocol="openai",
        api_key_env="LLAMA_API_KEY", env_unset=("LLAMA_ARG_*",),
        failure_patterns=(
            ("model_not_found", r"failed to open GGUF file|No such file"),
            ("model_corrupt", r"gguf_init_from_\w+: (invalid|failed)|error loading model|failed to load model"),
            ("port_in_use", r"couldn't bind HTTP server socket"),
            ("bad_flag", r"error: invalid argument|error: unknown argument"),
        ),
        version_argv=("{binary}", "--version"), metrics_path="/metrics", metrics_prefix="llamacpp:",
        info_paths=("/props",),
        notes="llama.cpp's own llama-server binary; /health is 503 while loading; /metrics needs --metrics"),
    "schedule": Backend(
        name="schedule", argv=(*_PY_SERVER, "--model", "{model}", "--host", "{host}", "--port", "{port}"),
        module="framework.servers.schedule", health_path="/health", protocol="openai",
        version_package="framework", info_paths=("/version",),
        notes="a streaming server with a known schedule and a truth log of every token's write time "
              "(framework.servers.schedule: --first-token-ms, --interval-ms, --tokens, --truth-log); "
              "for measuring the client itself"),
    "command": Backend(
        name="command", argv=(), health_path="/health", protocol="openai", env_unset=COMMAND_ENV_UNSET,
        info_paths=("/version",),
        notes="any OpenAI-compatible server: backend.argv with {host} {port} {model} ..."),
}


class BackendSettings(BaseModel):
    """The `backend` config group (conf/backend/*.yaml): a table row's name plus the user's settings."""

    model_config = ConfigDict(extra="forbid")

    name: BackendName
    python: str | None = None  # interpreter for {python}; null = this one
    module: str | None = None  # {module}; null = the table's
    binary: str | None = None  # {binary}; null = the table's (llama-server)
    argv: list[Arg] | None = None  # replaces the table's argv template (required by `command`)
    health_path: str | None = None  # null = the table's readiness route
    protocol: Protocol | None = None  # null = the table's
    host: str = "127.0.0.1"
    allow_remote: bool = False  # a host other than loopback only when asked: the servers are reachable from outside
    ready_timeout_s: float = Field(900.0, gt=0)
    settle_timeout_s: float = Field(60.0, gt=0)  # wait for the previous server's group, port and GPU memory
    default_args: list[Arg] | None = None  # null = the table's (e.g. llamacpp's --interrupt_requests False)
    extra_args: list[Arg] = []  # numbers become their text (Hydra reads 8192 as an int)
    env: dict[str, str] = {}
    api_key: str | None = None
    # simulator only
    flags: str | None = None  # whose flag names it takes; null = the table's (a twin of llama.cpp/vLLM takes theirs)
    speedup: float = Field(1.0, gt=0)
    noise_scale: float = Field(1.0, ge=0)
    machine_effect: float = Field(0.0, ge=0)  # log-sd of a machine-level effect (framework.servers.sim; 0: off)
    ground_truth: bool = False
    # endpoint only
    url: str | None = None

    @property
    def time_scale(self) -> float:
        """Factor from wall seconds to model seconds for everything the client measures."""
        return self.speedup if self.simulated else 1.0

    @property
    def table(self) -> Backend:
        return BACKENDS[self.name]

    @property
    def simulated(self) -> bool:
        return self.table.simulated

    @property
    def effective_protocol(self) -> Protocol:
        return self.protocol or self.table.protocol

    @property
    def effective_health_path(self) -> str:
        return self.health_path or self.table.health_path


def is_loopback(host: str) -> bool:
    """Whether a listening address is this machine's loopback (127.0.0.0/8, ::1, localhost)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


def remote_listen_warning(backend: BackendSettings) -> str | None:
    """The warning a run prints before it starts servers on a non-loopback address (allowed by allow_remote)."""
    if backend.name == "endpoint" or is_loopback(backend.host):
        return None
    return (f"warning: backend.host={backend.host}: the servers listen where other machines can reach them (no "
            f"authentication unless backend.api_key is set); backend.allow_remote=true asked for it")


def probe_values(backend: BackendSettings) -> dict[str, str]:
    """Placeholder values for the version and build-info probes (no launch-specific ones)."""
    row = backend.table
    return {"python": backend.python or sys.executable, "module": backend.module or row.module or "",
            "binary": backend.binary or row.binary or ""}


def template(backend: BackendSettings) -> tuple[str, ...]:
    return tuple(backend.argv) if backend.argv is not None else backend.table.argv


def check(backend: BackendSettings, exp: Experiment | None = None) -> None:
    """Everything about the settings that can be wrong before a launch (raises BackendConfigError)."""
    row = backend.table
    takes = backend.flags or row.flags
    if exp is not None and takes is not None and exp.flags != takes:
        raise BackendConfigError("backend", f"experiment {exp.name} uses {exp.flags}'s flag names "
                                 f"(flags: {exp.flags}), which the {row.name} backend does not take; use "
                                 f"{' or '.join(n for n, r in BACKENDS.items() if r.flags == exp.flags)}, "
                                 "endpoint or command")
    if not row.starts_server:
        return
    argv = template(backend)
    if not argv:
        raise BackendConfigError("backend.argv", f"the {row.name} backend needs an argv template, e.g. "
                                 "[my-server, --model, '{model}', --host, '{host}', --port, '{port}']")
    used: set[str] = set()
    for arg in argv:
        try:
            fields = [f for _, f, _, _ in string.Formatter().parse(arg) if f is not None]
        except ValueError as exc:
            raise BackendConfigError("backend.argv", f"{arg!r}: {exc} (write literal braces as {{{{ }}}})") from None
        for name in fields:
            if name not in PLACEHOLDERS:
                raise BackendConfigError("backend.argv", f"unknown placeholder {{{name}}} in {arg!r}; "
                                         f"allowed: {', '.join('{' + p + '}' for p in PLACEHOLDERS)}")
            used.add(name)
    if "port" not in used:
        raise BackendConfigError("backend.argv", "the argv template must contain {port} (each launch gets a free port)")
    if exp is not None and exp.tp_size != 1 and "tp" not in used:
        raise BackendConfigError("backend", f"the {row.name} backend has no tensor-parallel flag, but the experiment "
                                 f"{exp.name} has tp_size={exp.tp_size}; use tp_size: 1")


def server_spec(
    backend: BackendSettings,
    exp: Experiment,
    h: Hypothesis,
    cond: design.Condition,
    *,
    port: int,
    seed: int,
    log_path: Path,
    machine: str | None = None,
) -> ServerSpec:
    """What to run for one launch of `cond` (not used by backends that start nothing)."""
    check(backend, exp)
    row = backend.table
    probe = probe_values(backend)
    values = {
        **probe,
        "python": design.python_for(h, cond, probe["python"]),
        "model": exp.model_path,
        "tp": str(exp.tp_size),
        "host": backend.host,
        "port": str(port),
        "seed": str(seed),
    }
    argv = [arg.format_map(values) for arg in template(backend)]
    argv += backend.default_args if backend.default_args is not None else row.default_args
    argv += [*design.server_args_for(h, exp, cond), *backend.extra_args]
    env = {**backend.env, **design.env_for(h, cond)}
    if backend.api_key:
        if row.api_key_env:
            env[row.api_key_env] = backend.api_key
        else:
            argv += [a.format(api_key=backend.api_key) for a in row.api_key_args]
    argv += sim_args(backend, h, exp, cond, log_path, machine)
    return ServerSpec(
        argv=argv, host=backend.host, port=port, log_path=log_path, env=env, env_unset=row.env_unset,
        ready_timeout_s=backend.ready_timeout_s, health_path=backend.effective_health_path, api_key=backend.api_key,
    )


def sim_args(backend: BackendSettings, h: Hypothesis, exp: Experiment, cond: design.Condition,
             log_path: Path, machine: str | None = None) -> list[str]:
    """The simulator's own `--sim-*` flags (its profile, clock and noise, and a machine-level effect drawn
    from the launch's `machine`, its label or else its id, when `machine_effect` is on); nothing for other
    backends."""
    if not backend.simulated:
        return []
    args = [
        "--sim-profile", design.sim_profile_for(h, exp, cond),
        "--sim-speedup", repr(backend.speedup),
        "--sim-noise-scale", repr(backend.noise_scale),
    ]
    if backend.ground_truth:
        args += ["--sim-ground-truth", str(log_path.with_suffix(".chunks.jsonl"))]
    if backend.machine_effect > 0 and machine:
        args += ["--sim-machine-effect", repr(backend.machine_effect), "--sim-machine", machine]
    return args


def time_scale_of(backend: BackendSettings, info: dict[str, Any] | None) -> float:
    """Model seconds per wall second: the sim's speed-up, as configured or as an endpoint reports it."""
    if backend.name == "endpoint" and info and info.get("sim_speedup"):
        return float(info["sim_speedup"])
    return backend.time_scale


def backend_label(backend: BackendSettings, info: dict[str, Any] | None) -> str:
    """What produced the data: an endpoint that is the simulator is labelled `sim`, never real."""
    if info and info.get("backend") == "sim":
        return "sim"
    return backend.name
