"""Why a server launch failed, from its exit code and its log: one class and the line that shows it.

Pure functions over plain data. Every backend crashes in its own words, so the backend table
(`framework.execution.backends`) gives each backend its own patterns; they are tried before the
generic ones below, which cover what Python servers, PyTorch, CUDA and uvicorn print.

The log is read from the end backwards and the first line that matches a pattern wins: the last
telling line is the one nearest the exit. Lines that only restate a failure (llama.cpp's "Failed
to load model from file", vLLM's "Engine core initialization failed. See root cause above") are
skipped while a line above them names the cause. An argparse help
text printed after an error (llama-cpp-python prints one after a bad value) is dropped first, so
that option descriptions never match.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from framework.core.vocabulary import LAUNCH_LOST_REQUEST, FailureClass

Patterns = Sequence[tuple[str, str]]  # (class, regular expression), tried in order on each line

# Tried on every line after a backend's own patterns; the order settles lines that match two.
GENERIC_PATTERNS: Patterns = (
    # the sim's model clock stopped waiting for a promised request while others were in flight (or a request
    # came after its promise was given up): its figures would follow the wall clock, so it exits instead
    ("sim_clock_gave_up", r"\bsim_clock_gave_up: "),
    ("port_in_use", r"[Aa]ddress already in use|EADDRINUSE|\[Errno 98\]|couldn't bind HTTP server socket"),
    ("cuda_mismatch", r"no kernel image is available|No supported CUDA architectures|"
                      r"CUDA driver version is insufficient|driver on your system is too old|"
                      r"cudaErrorNoKernelImageForDevice|cudaErrorInsufficientDriver|"
                      r"is not compatible with the current PyTorch installation|Found no NVIDIA driver|"
                      r"CUDA error: (invalid device function|no kernel image)|unsupported gpu architecture|"
                      r"lib(cuda|cudart|torch_cuda|nvrtc)\b[\w.]*\.so[\d.]*: cannot open shared object file"),
    # a dependency missing from the server's environment, or one whose compiled part does not fit this
    # torch (vLLM beside a CPU torch: `operator torchvision::nms does not exist`, `_torchaudio.so`, libtorchcodec)
    ("missing_module", r"ModuleNotFoundError: No module named|ImportError: No module named"),
    ("extension_mismatch", r"operator [\w:]+ does not exist|undefined symbol: |Could not load libtorchcodec|"
                           r"_torchaudio[\w.]*\.so|\.so[\d.]*: cannot open shared object file|"
                           r"version `[\w.]+' not found"),
    # the launcher adds the OOM-killer line (framework.execution.launcher.OOM_KILL_NOTE) when it saw a kill
    ("host_out_of_memory", r"DefaultCPUAllocator: can't allocate memory|Cannot allocate memory|std::bad_alloc|"
                           r"\bMemoryError\b|the kernel's OOM killer killed"),
    ("out_of_memory", r"CUDA out of memory|OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED|cudaErrorMemoryAllocation|"
                      r"\bout of memory\b|"
                      r"failed to allocate|No available memory for the cache blocks|Not enough memory"),
    ("model_not_found", r"[Mm]odel path does not exist|No such file or directory|is not a local folder and is not a "
                        r"valid model identifier|Repository Not Found|RepositoryNotFoundError|"
                        r"Incorrect path_or_model_id|(model|file) (path )?not found|does not appear to have a file"),
    ("model_corrupt", r"Failed to load model|error loading model|invalid magic|not a GGUF|unknown model architecture|"
                      r"unsupported model architecture|architectures? .* (are|is) not supported|SafetensorError|"
                      r"Error while deserializing|failed to read tensor|tensor .* data is not within|"
                      r"unexpected end of file|Unrecognized model in|invalid load key"),
    ("bad_value", r"validation errors? for \w+|Input should be|Invalid boolean argument|"
                  r"argument [-\w/]+: invalid \w+ value|invalid choice:|must be (greater|less|positive)"),
    ("bad_flag", r"unrecognized arguments?|ambiguous option|expected (one|at least one) argument|"
                 r"the following arguments are required|invalid argument:|unknown (argument|option)"),
)

# Lines that only restate a failure whose cause is logged above them: used only when no other line matches.
SUMMARY_LINES = re.compile(
    r"(ValueError: )?Failed to load model from file|llama_model_load_from_file_impl: failed to load model|"
    r"error loading model: llama_model_loader: failed to load model|Engine core initialization failed|"
    r"See root cause above|"
    r"SIGQUIT received\. .*It usually means one child failed"  # SGLang's, after a child's traceback
)
# Classes a server that exits while being measured names itself; any other exit then is crash_after_ready
AFTER_READY_CLASSES: frozenset[str] = frozenset({"sim_clock_gave_up"})
_ARGPARSE_ERROR = re.compile(r"^\S+: error: ")
_ERRORISH = re.compile(r"(Error|Exception|error:|FATAL|Traceback|failed)")


@dataclass(frozen=True)
class Failure:
    """A classified launch failure: the class, the line that shows it (or a summary) and the exit code."""

    cls: FailureClass
    line: str
    exit_code: int | None = None
    summary: str | None = None  # the launcher's own words ("server exited with code 3 during start-up", ...)

    def message(self) -> str:
        """One line for the record, the verdict table and the console: class, what happened, the evidence."""
        if self.summary:
            return f"{self.cls}: {self.summary}: {self.line}"
        code = "" if self.exit_code is None else f" (exit code {self.exit_code})"
        return f"{self.cls}: {self.line}{code}"


def strip_help(lines: Sequence[str]) -> list[str]:
    """The log without a trailing argparse help block (from the last `usage:` line), keeping argparse errors."""
    start = max((i for i, ln in enumerate(lines) if ln.lstrip().startswith("usage:")), default=None)
    if start is None:
        return list(lines)
    return list(lines[:start]) + [ln for ln in lines[start:] if _ARGPARSE_ERROR.match(ln.strip())]


def _compiled(patterns: Iterable[tuple[str, str]]) -> list[tuple[str, re.Pattern[str]]]:
    return [(cls, re.compile(rx)) for cls, rx in patterns]


def match_line(lines: Sequence[str], patterns: Patterns = ()) -> tuple[str, str] | None:
    """The (class, line) of the last log line matching a backend pattern or a generic one."""
    compiled = _compiled(patterns) + _compiled(GENERIC_PATTERNS)
    candidates = [ln.strip() for ln in strip_help(lines) if ln.strip() and not ln.strip().startswith('File "')]
    for summaries in (False, True):  # a cause first; a summary line only when no cause is logged
        for text in reversed(candidates):
            if not summaries and SUMMARY_LINES.search(text):
                continue
            for cls, rx in compiled:
                if rx.search(text):
                    return cls, text
    return None


def _last_errorish(lines: Sequence[str], fallback: bool = True) -> str | None:
    kept = strip_help(lines)
    for summaries in (False, True):  # a line that only restates the failure yields to the cause above it
        for line in reversed(kept):
            text = line.strip()
            if text and _ERRORISH.search(text) and not text.startswith('File "') and (
                    summaries or not SUMMARY_LINES.search(text)):
                return text
    return next((ln.strip() for ln in reversed(lines) if ln.strip()), None) if fallback else None


def classify(
    exit_code: int | None,
    log_lines: Sequence[str],
    patterns: Patterns = (),
    *,
    timed_out: bool = False,
    after_ready: bool = False,
    summary: str | None = None,
) -> Failure:
    """The class of a failed launch.

    `timed_out`: the server was still running when the readiness deadline passed. `after_ready`:
    it had answered its health route and then exited (the measured requests died with it): crash_after_ready,
    unless its log names one of ``AFTER_READY_CLASSES`` (the sim's ``sim_clock_gave_up``). An
    exit during start-up is classified by the log; exit code 2 with an argparse `error:` line is a
    bad flag even when no pattern knows the wording; a negative code is the signal that ended it.

    A process ended by a signal shows the signal as its evidence (`signal_evidence`: "ended by SIGKILL
    (signal 9)"), then the log's last cause: a line a pattern matched, else its last error-looking line
    that is not a warning (issue 31: a killed vLLM showed its start-up WARNING about the ulimit instead).
    """
    found = match_line(log_lines, patterns)
    if after_ready and not timed_out and found and found[0] in AFTER_READY_CLASSES:  # the server named it itself
        return Failure(found[0], found[1], exit_code, summary)  # type: ignore[arg-type]
    signalled = not timed_out and exit_code is not None and exit_code < 0
    if signalled:  # the signal is the evidence; a warning it cut short is not its cause
        found = match_line(_not_warnings(log_lines), patterns)
        cause = found[1] if found else _last_errorish(_not_warnings(log_lines), fallback=False)
        line = signal_evidence(exit_code, cause)  # type: ignore[arg-type]
        cls = "crash_after_ready" if after_ready else (found[0] if found else "killed")
        return Failure(cls, line, exit_code, summary)  # type: ignore[arg-type]
    evidence = found[1] if found else (_last_errorish(log_lines) or "no log output")
    if timed_out:
        return Failure("ready_timeout", evidence, None, summary)
    if after_ready:
        return Failure("crash_after_ready", evidence, exit_code, summary)
    if found:
        return Failure(found[0], found[1], exit_code, summary)  # type: ignore[arg-type]
    if exit_code == 2:
        argparse_line = next((ln.strip() for ln in reversed(log_lines) if _ARGPARSE_ERROR.match(ln.strip())), None)
        if argparse_line:
            return Failure("bad_flag", argparse_line, exit_code, summary)
    return Failure("exited", evidence, exit_code, summary)


def lost_requests(lost: dict[str, Any]) -> Failure | None:
    """A launch whose requests were lost while it was measured, and its server did not exit: its failure.

    `lost`: {sent, classes: {request error class: n}, first: (class, error), first_refused: error}. Refused
    connections (`connection_refused`) mean nothing listened at the server's address: the server is gone (a
    dead endpoint, or a process that closed its port), so they name the launch, whichever request was lost
    first, and the summary says so rather than that the server stayed up. Otherwise the class is the first
    lost request's (framework.core.vocabulary.LAUNCH_LOST_REQUEST), the line its error.
    """
    if not lost.get("first"):
        return None
    classes: dict[str, int] = lost.get("classes") or {}
    counts = ", ".join(f"{n} {c}" for c, n in sorted(classes.items()))
    n = sum(classes.values())
    refused = classes.get("connection_refused", 0)
    if refused:
        line = lost.get("first_refused") or lost["first"][1]
        return Failure("connection_refused", line,
                       summary=f"the server is gone, not cutting streams: {refused} connection(s) refused (nothing "
                               f"listened at its address); {n} of {lost['sent']} requests lost ({counts})")
    cls, line = lost["first"]
    return Failure(LAUNCH_LOST_REQUEST[cls], line,  # type: ignore[arg-type]
                   summary=f"{n} of {lost['sent']} requests lost while the server stayed up ({counts})")


_WARNING = re.compile(r"\bWARN(ING)?\b|\bwarnings?\.warn|UserWarning|FutureWarning|DeprecationWarning")


def _not_warnings(lines: Sequence[str]) -> list[str]:
    """The log without its warning lines: a warning is printed and survived, so it is not why a process died."""
    return [ln for ln in lines if not _WARNING.search(ln)]


def _signal_line(exit_code: int) -> str:
    """A negative exit code as the signal that ended the process: "ended by SIGKILL (signal 9)"."""
    try:
        name = f"{signal.Signals(-exit_code).name} (signal {-exit_code})"
    except ValueError:
        name = f"signal {-exit_code}"
    return f"ended by {name}"


def signal_evidence(exit_code: int, cause: str | None = None) -> str:
    """The evidence of a process ended by a signal: the signal first, then the log's last cause, or for
    SIGKILL without one the usual sender."""
    line = _signal_line(exit_code)
    if cause:
        return f"{line}; the log's last error before it: {cause}"
    hint = "; the kernel's out-of-memory killer sends SIGKILL" if -exit_code == signal.SIGKILL else ""
    return line + hint
