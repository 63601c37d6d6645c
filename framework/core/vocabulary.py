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
    "sim_clock_gave_up",  # the sim's model clock gave up waiting for a promised request mid-run (it exits)
    "stream_cut",         # it stayed up but cut streams before their requests finished
    "hung_up",            # it stayed up but dropped or refused connections while being measured
    "stalled",            # it stayed up but streams stopped sending (no data for request_timeout_s)
    "connection_refused",  # connections were refused while measured: nothing listened, the server is gone
    "ready_timeout",      # the server neither became ready nor exited in time
    "killed",             # ended by a signal with no telling log line
    "exited",             # exited during start-up; nothing in the log matched a known class
]
FAILURE_CLASSES: tuple[str, ...] = get_args(FailureClass)

# context_length: the server refused the request as longer than its context (SGLang sends that as a stream event)
# connection: dropped or reset; connection_refused: nothing listened at the address (the server is gone)
RequestErrorClass = Literal["http_error", "timeout", "stream_cut", "malformed_stream", "connection", "cancelled",
                            "context_length", "connection_refused"]

# A failed request's class in words, for the analysis of what a condition lost (rules version 4, `loss_causes`)
REQUEST_ERRORS: dict[str, str] = {
    "connection_refused": "connection refused: the server was gone, not cutting streams",
    "connection": "connection dropped",
    "stream_cut": "stream cut before it finished",
    "timeout": "timed out",
    "http_error": "HTTP error",
    "context_length": "longer than the context",
    "malformed_stream": "malformed stream",
    "cancelled": "cancelled",
    "unknown": "no error class",
}

# Why an ok request has no decode figure (the request row's `decode_unmeasured`); its words for reasons
DecodeUnmeasured = Literal["no_tokens", "one_token", "one_chunk", "no_time", "one_read"]
DECODE_UNMEASURED: dict[str, str] = {
    "no_tokens": "no token arrived",
    "one_token": "a single output token, nothing to decode",
    "one_chunk": "every token arrived in one chunk (merged by the server), so decode has no duration",
    "no_time": "the chunks after the first arrived at the same instant (no per-token timing)",
    "one_read": ("every token arrived in one read but in separate events: the server did not merge them, the "
                 "client read them together (it fell behind, or the writes came at once): the client's loss"),
    "no_value": "the metric has no value on the row",
}
# Request errors that mean the server did not serve its workload: the launch fails (its class)
LAUNCH_LOST_REQUEST: dict[str, str] = {"stream_cut": "stream_cut", "connection": "hung_up", "timeout": "stalled",
                                        "connection_refused": "connection_refused"}

AnalysisMethod = Literal["welch", "rank", "bootstrap", "anytime"]
ANALYSIS_METHODS: tuple[str, ...] = get_args(AnalysisMethod)

MultiplicityMethod = Literal["holm", "fdr_bh"]
MULTIPLICITY_METHODS: tuple[str, ...] = get_args(MultiplicityMethod)
