"""Failure classes from exit codes and log lines (pure). Real llama.cpp processes: tests/e2e/test_llamacpp.py."""

from __future__ import annotations

import pytest

from framework.core.vocabulary import FAILURE_CLASSES
from framework.execution.backends import BACKENDS
from framework.execution.failures import classify, lost_requests, strip_help
from framework.execution.launcher import OOM_KILL_NOTE

VLLM = BACKENDS["vllm"].failure_patterns
SGLANG = BACKENDS["sglang"].failure_patterns
LLAMA = BACKENDS["llamacpp"].failure_patterns

ARGPARSE = ["usage: api_server.py [-h] [--host HOST] [--port PORT]",
            "api_server.py: error: unrecognized arguments: --tp-sise 8"]


@pytest.mark.parametrize("code, lines, patterns, expected", [
    (2, ARGPARSE, VLLM, "bad_flag"),
    (2, ["usage: x [-h]", "x: error: something argparse never said before"], (), "bad_flag"),
    (2, ["usage: x", "x: error: argument --n_threads: invalid int value: 'two'"], LLAMA, "bad_value"),
    # vLLM's engine failures: the root cause sits above a generic last line that matches nothing
    (1, ["ERROR [core.py:700] EngineCore failed to start.",
         "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
         "initializing the engine.",
         "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"],
     VLLM, "out_of_memory"),
    (1, ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
         "79.19 GiB of which 1.06 GiB is free."], VLLM, "out_of_memory"),
    (1, ["RuntimeError: CUDA error: no kernel image is available for execution on the device"], VLLM, "cuda_mismatch"),
    (1, ["RuntimeError: The NVIDIA driver on your system is too old (found version 11040)."], VLLM, "cuda_mismatch"),
    (1, ["OSError: nope/llama is not a local folder and is not a valid model identifier listed on "
         "'https://huggingface.co/models'"], VLLM, "model_not_found"),
    (1, ["ValueError: Model architectures ['FooForCausalLM'] are not supported for now."], VLLM, "model_corrupt"),
    (1, ["ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 8000): address already in use",
         "INFO:     Waiting for application shutdown."], VLLM, "port_in_use"),
    (1, ["Traceback (most recent call last):", '  File "x.py", line 3, in <module>',
         "RuntimeError: No supported CUDA architectures found for major versions [9, 10]"], SGLANG, "cuda_mismatch"),
    # llama-cpp-python, as the issue recorded it
    (1, ["ValueError: Model path does not exist: /nope.gguf"], LLAMA, "model_not_found"),
    (1, ["gguf_init_from_file_impl: invalid magic characters: 'xxxx', expected 'GGUF'",
         "llama_model_load: error loading model: llama_model_loader: failed to load model from /m.gguf",
         "ValueError: Failed to load model from file: /m.gguf"], LLAMA, "model_corrupt"),
    (1, ["1 validation error for Settings", "n_threads",
         "  Input should be greater than or equal to 1 [type=greater_than_equal, input_value=0, input_type=int]"],
     LLAMA, "bad_value"),
    (-9, ["loading model"], LLAMA, "killed"),
    # a dependency missing or not fitting this torch: each of these was printed by a real start-up here
    (1, ["Traceback (most recent call last):", "ModuleNotFoundError: No module named 'vllm'"], VLLM, "missing_module"),
    (1, ["  File \"torchvision/_meta_registrations.py\", line 163, in <module>",
         "RuntimeError: operator torchvision::nms does not exist"], VLLM, "extension_mismatch"),
    (1, ["OSError: /venv/lib/python3.11/site-packages/torchaudio/lib/_torchaudio.abi3.so: undefined symbol: "
         "_ZN3c104cuda9SetDeviceEa"], VLLM, "extension_mismatch"),
    (1, ["OSError: libcudart.so.12: cannot open shared object file: No such file or directory"], SGLANG,
     "cuda_mismatch"),
    (1, ["RuntimeError: [enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: "
         "you tried to allocate 100000000000000 bytes. Error code 12 (Cannot allocate memory)"], VLLM,
     "host_out_of_memory"),
    (-9, ["loading model", OOM_KILL_NOTE.format(n=1, before=3, after=4)], SGLANG, "host_out_of_memory"),
    (1, ["loading model", "something odd happened"], LLAMA, "exited"),
])
def test_classes_from_exit_codes_and_log_lines(code, lines, patterns, expected):
    failure = classify(code, lines, patterns)
    assert failure.cls == expected and failure.cls in FAILURE_CLASSES
    assert failure.exit_code == code
    assert f"(exit code {code})" in failure.message() and failure.message().startswith(expected + ": ")


def test_the_line_shown_is_the_evidence_not_a_traceback_frame():
    failure = classify(1, ["Traceback (most recent call last):", '  File "/x/model_path does not exist.py", line 1',
                           "ValueError: Model path does not exist: /nope.gguf"], LLAMA)
    assert failure.line == "ValueError: Model path does not exist: /nope.gguf"


def test_timeouts_and_crashes_after_ready_are_their_own_classes():
    assert classify(None, ["still loading"], timed_out=True).cls == "ready_timeout"
    crash = classify(-11, ["serving", "Segmentation fault"], after_ready=True)
    assert crash.cls == "crash_after_ready" and crash.exit_code == -11
    # the cause, when the log names one, is the line shown
    oom = classify(1, ["serving", "torch.OutOfMemoryError: CUDA out of memory."], VLLM, after_ready=True)
    assert oom.cls == "crash_after_ready" and "out of memory" in oom.line


def test_a_server_killed_after_ready_shows_the_signal_not_its_last_info_line():
    log = ["INFO:     Uvicorn running on http://127.0.0.1:8000", "INFO:     127.0.0.1 - \"POST /v1/completions\" 200"]
    crash = classify(-9, log, after_ready=True, summary="server exited with code -9 while being measured")
    assert crash.cls == "crash_after_ready" and crash.line.startswith("ended by SIGKILL"), crash
    assert "SIGKILL" in crash.message() and "INFO" not in crash.message()
    # the signal first, then the log's last error before it
    told = classify(-6, [*log, "RuntimeError: CUDA error: an illegal memory access was encountered"], after_ready=True)
    assert told.line == ("ended by SIGABRT (signal 6); the log's last error before it: RuntimeError: CUDA error: an "
                         "illegal memory access was encountered")


# vLLM's start-up lines as it prints them on a host whose fd limit it cannot raise (issue 31)
VLLM_ULIMIT = [
    "INFO 12-01 10:00:00 [__init__.py:239] Automatically detected platform cuda.",
    "WARNING 12-01 10:00:01 [utils.py:2273] Found ulimit of 1024 and failed to automatically increase with error "
    "current limit exceeds maximum limit. This can cause fd limit errors like `OSError: [Errno 24] Too many open "
    "files`. Consider increasing with ulimit -n",
    "INFO 12-01 10:00:09 [api_server.py:1090] Starting vLLM API server 0 on http://127.0.0.1:8000",
    "INFO:     127.0.0.1:50312 - \"POST /v1/completions HTTP/1.1\" 200 OK",
]


@pytest.mark.parametrize("after_ready,cls", [(True, "crash_after_ready"), (False, "killed")])
def test_a_killed_vllms_evidence_is_the_signal_not_its_ulimit_warning(after_ready, cls):
    f = classify(-9, VLLM_ULIMIT, BACKENDS["vllm"].failure_patterns, after_ready=after_ready)
    assert f.cls == cls and f.line == "ended by SIGKILL (signal 9); the kernel's out-of-memory killer sends SIGKILL"
    assert "ulimit" not in f.message() and "WARNING" not in f.message()
    # the same warning in a log that exited on its own is still the last error-looking line (no signal to show)
    assert "ulimit" in classify(1, VLLM_ULIMIT[:2], BACKENDS["vllm"].failure_patterns).line


def test_help_text_after_an_error_never_matches():
    # llama-cpp-python prints its whole --help after a settings error; option texts mention memory and models
    lines = ["1 validation error for Settings", "n_ctx", "  Input should be greater than or equal to 0",
             "usage: __main__.py [-h] [--model MODEL]", "  --model MODEL  The path to the model. Failed to load model",
             "  --use_mlock  Force the system to keep the model in RAM. out of memory"]
    assert strip_help(lines) == lines[:3]
    assert classify(1, lines, LLAMA).cls == "bad_value"


def test_the_launchers_summary_leads_the_message():
    failure = classify(3, ["fault injected: crash at start"], summary="server exited with code 3 during start-up")
    assert failure.message() == "exited: server exited with code 3 during start-up: fault injected: crash at start"
    timeout = classify(None, ["loading"], timed_out=True, summary="server not ready after 12 s (no 200 from /health)")
    assert timeout.message().startswith("ready_timeout: server not ready after 12 s")



def test_refused_connections_name_the_launch_the_server_is_gone():
    """Issue 31: a dead endpoint's one cut stream and 394 refusals were "395 of 400 requests lost while the
    server stayed up" (stream_cut, the first lost request's class)."""
    lost = {"sent": 400, "classes": {"stream_cut": 1, "connection_refused": 394},
            "first": ("stream_cut", "stream ended before the request finished (3 tokens received)"),
            "first_refused": "ClientConnectorError: Cannot connect to host 127.0.0.1:9 [Connect call failed]"}
    f = lost_requests(lost)
    assert f is not None and f.cls == "connection_refused" and f.line == lost["first_refused"]
    assert "394 connection(s) refused" in f.message() and "the server is gone, not cutting streams" in f.message()
    assert "stayed up" not in f.message() and "395 of 400 requests lost" in f.message()
    assert f.message().startswith("connection_refused: the server is gone")
    cut = lost_requests({"sent": 9, "classes": {"stream_cut": 2}, "first": ("stream_cut", "stream ended")})
    assert cut is not None and cut.cls == "stream_cut" and "while the server stayed up (2 stream_cut)" in cut.message()
    assert lost_requests({"sent": 9, "classes": {}, "first": None}) is None
    assert "connection_refused" in FAILURE_CLASSES
