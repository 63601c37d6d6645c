"""The project's closed vocabularies, one source each: why a launch failed, why a request failed,
which analysis method decides, which multiplicity adjustment a sweep uses.

Specs validate against these, the execution layer produces them, records and reports show them;
a new word is added here and nowhere else.
"""

from __future__ import annotations

from typing import Literal, get_args

FailureClass = Literal[
    "bad_flag",           # argparse rejected the command line (exit 2)
    "bad_value",          # a flag's value was rejected (out of range, wrong type, missing required setting)
    "model_not_found",    # the model path or repository does not exist
    "model_corrupt",      # the model file exists but cannot be loaded (damaged, unsupported format or architecture)
    "port_in_use",        # the HTTP port was taken
    "out_of_memory",      # GPU memory ran out, or memory of a kind the log does not say
    "host_out_of_memory",  # host RAM ran out: the CPU allocator failed, or the kernel's OOM killer struck
    "missing_module",     # a Python module the server imports is not installed (ModuleNotFoundError)
    "extension_mismatch",  # a compiled extension will not load beside this torch (undefined symbol, missing op)
    "cuda_mismatch",      # kernels not built for this GPU architecture, or a driver too old for the CUDA runtime
    "crash_after_ready",  # the server answered its health route, then died while being measured
    "ready_timeout",      # the server neither became ready nor exited in time
    "killed",             # ended by a signal with no telling log line
    "exited",             # exited during start-up; nothing in the log matched a known class
]
FAILURE_CLASSES: tuple[str, ...] = get_args(FailureClass)

# context_length: the server refused the request as longer than its context (SGLang sends that as a stream event)
RequestErrorClass = Literal["http_error", "timeout", "stream_cut", "malformed_stream", "connection", "cancelled",
                            "context_length"]
REQUEST_ERROR_CLASSES: tuple[str, ...] = get_args(RequestErrorClass)

AnalysisMethod = Literal["welch", "rank", "bootstrap", "anytime"]
ANALYSIS_METHODS: tuple[str, ...] = get_args(AnalysisMethod)

MultiplicityMethod = Literal["holm", "fdr_bh"]
MULTIPLICITY_METHODS: tuple[str, ...] = get_args(MultiplicityMethod)
