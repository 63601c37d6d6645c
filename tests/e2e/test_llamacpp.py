"""Real llama.cpp servers (llama-cpp-python), launched and classified by the framework.

Marker `llamacpp`: left out of the default `python -m pytest -q`; `python -m pytest -q -m llamacpp` runs
it (`.ci/run` does, after installing llama-cpp-python[server] and gguf), skipped with the reason when
they are absent. The model is the
seeded tiny Llama (framework.assets.tiny_gguf), generated once per module in a second or two.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import socket
import sys
import textwrap
from pathlib import Path

import pytest
from cli_helpers import framework, ledger_records, starts_hypothesis

from framework.assets.tiny_gguf import tiny_llama, write_gguf
from framework.core import design
from framework.core.spec import Experiment, Hypothesis
from framework.errors import LaunchError
from framework.execution.backends import BackendSettings, server_spec
from framework.execution.failures import classify
from framework.execution.launcher import ServerProcess, free_port, log_tail

MISSING = [m for m in ("llama_cpp", "gguf", "fastapi", "sse_starlette", "pydantic_settings")
           if importlib.util.find_spec(m) is None]
pytestmark = [
    pytest.mark.llamacpp,
    pytest.mark.skipif(bool(MISSING), reason=f"llama-cpp-python[server] and gguf are not installed ({MISSING}); "
                                            "pip install -e '.[llamacpp]' or run .ci/run"),
]

EXPERIMENT = """\
name: tiny_llama_cpu
flags: llamacpp
model_path: models/tiny-llama.gguf
server_args: [--n_ctx, "256"]  # verbose (the default) logs the cause of a load failure
workload: {prompt: text, prompt_tokens: 16, output_tokens: 16}  # the vocabulary has 512 ids: send words
"""


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("model") / "tiny-llama.gguf"
    write_gguf(tiny_llama(0), path)
    return path


def _workdir_with_model(workdir: Path, model: Path) -> None:
    (workdir / "models").mkdir()
    shutil.copy(model, workdir / "models" / "tiny-llama.gguf")
    (workdir / "exp").mkdir()
    (workdir / "exp" / "tiny_llama_cpu.yaml").write_text(EXPERIMENT)


def _refuses_huge_allocations() -> bool:
    """Linux's heuristic overcommit (mode 0) refuses a 400 GB allocation on a machine with less memory."""
    import psutil

    try:
        mode = Path("/proc/sys/vm/overcommit_memory").read_text().strip()
    except OSError:
        return False
    return mode == "0" and psutil.virtual_memory().total + psutil.swap_memory().total < 300 * 2**30


def test_each_failure_class_comes_from_a_real_llama_cpp_process(workdir, tiny_model):
    """Bad flag, bad value, missing model, corrupt model, port in use and host out of memory, from real launches."""
    _workdir_with_model(workdir, tiny_model)
    data = (workdir / "models" / "tiny-llama.gguf").read_bytes()
    (workdir / "models" / "truncated.gguf").write_bytes(data[:100_000])  # tensors cut off
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    port = held.getsockname()[1]
    faults = {
        "bad_flag": '[--no_such_flag, "1"]',
        "bad_value": '[--n_threads, "0"]',
        "model_not_found": "[--model, models/missing.gguf]",
        "model_corrupt": "[--model, models/truncated.gguf]",
        "port_in_use": f'[--port, "{port}"]',  # argparse keeps the last --port
    }
    if _refuses_huge_allocations():  # a 400 GB KV cache: refused at once, never touched
        faults["out_of_memory"] = '[--n_ctx, "100000000"]'

    levels = "\n".join(f"      {k}: {{server_args: {v}}}" for k, v in faults.items())
    predictions = "\n".join(f"  - {{id: {k}, kind: launches, where: {{fault: {k}}}, expect: fails, failure_class: {k}}}"
                            for k in faults)
    (workdir / "hyp").mkdir()
    (workdir / "hyp" / "llamacpp_failures.yaml").write_text(textwrap.dedent("""\
        name: llamacpp_failures
        statement: Each broken configuration fails at start-up, and the framework names why.
        experiment: tiny_llama_cpu
        factors:
          fault:
            reference: bad_flag
            levels:
        """) + levels + "\npredictions:\n" + predictions + "\ndesign: {launches: 1, requests: 1, warmup: 0}\n")
    try:
        out = framework("run", "hypothesis=llamacpp_failures", "backend=llamacpp",
                        f"paths.hypotheses={workdir / 'hyp'}", f"paths.experiments={workdir / 'exp'}", cwd=workdir)
    finally:
        held.close()
    record = ledger_records(workdir / "verdicts.jsonl")[-1]
    assert record["backend"] == "llamacpp"
    assert {p["id"]: p["verdict"] for p in record["predictions"]} == dict.fromkeys(faults, "supported"), \
        [(p["id"], p["reason"]) for p in record["predictions"]] + [out.stdout[-3000:]]
    failures = {c["levels"]["fault"]: c["failures"] for c in record["conditions"]}
    assert "unrecognized arguments: --no_such_flag" in failures["bad_flag"][0]
    assert "Model path does not exist" in failures["model_not_found"][0]
    assert "not within the file bounds" in failures["model_corrupt"][0]
    assert "address already in use" in failures["port_in_use"][0] and "code 3" in failures["port_in_use"][0]
    if "out_of_memory" in faults:
        assert "failed to allocate" in failures["out_of_memory"][0]
    # the verdict table names the class and the line
    assert "fault=port_in_use failed: port_in_use:" in " ".join(out.stdout.split())
    # the environment names the server and the model it was given
    env = record["environment"]
    assert env["server_version"] == "0.3.36" and env["model"]["sha256"] and env["cpu"]["logical_cpus"]
    assert "AVX" in (env["server_build"] or "") or "NEON" in (env["server_build"] or "")


def test_a_slow_start_is_a_readiness_timeout(tmp_path, tiny_model):
    h = Hypothesis.model_validate({
        "name": "h", "statement": "s", "experiment": "e", "factors": {"x": {"reference": "a", "levels": {"a": {}}}},
        "predictions": [{"id": "p", "kind": "launches", "where": {"x": "a"}, "expect": "starts"}]})
    backend = BackendSettings(name="llamacpp", ready_timeout_s=0.2)
    exp = Experiment(name="e", model_path=str(tiny_model), flags="llamacpp")
    spec = server_spec(backend, exp, h, design.conditions(h)[0], port=free_port(), seed=1,
                       log_path=tmp_path / "server.log")
    server = ServerProcess(spec).start()
    with pytest.raises(LaunchError) as info:
        server.wait_ready()
    server.stop()
    failure = classify(info.value.exit_code, log_tail(spec.log_path, 400), backend.table.failure_patterns,
                       timed_out=info.value.timed_out)
    assert failure.cls == "ready_timeout"
    release = server.wait_released()
    assert release.group_gone and release.port_free


def test_the_tiny_model_serves_openai_completions_one_token_per_chunk(tmp_path, tiny_model):
    """Readiness on /v1/models (no /health), and every streamed chunk is one printable token."""
    import requests

    h = Hypothesis.model_validate({
        "name": "h", "statement": "s", "experiment": "e", "factors": {"x": {"reference": "a", "levels": {"a": {}}}},
        "predictions": [{"id": "p", "kind": "launches", "where": {"x": "a"}, "expect": "starts"}]})
    backend = BackendSettings(name="llamacpp", ready_timeout_s=120)
    spec = server_spec(backend, Experiment(name="e", model_path=str(tiny_model), server_args=["--n_threads", "1"],
                                               flags="llamacpp"),
                       h, design.conditions(h)[0], port=free_port(), seed=1, log_path=tmp_path / "server.log")
    with ServerProcess(spec) as server:
        assert requests.get(server.spec.base_url + "/health", timeout=5).status_code == 404
        resp = requests.post(server.spec.base_url + "/v1/completions", timeout=60, stream=True, json={
            "prompt": "the quick brown fox", "max_tokens": 32, "temperature": 0, "stream": True})
        texts = [line for line in resp.iter_lines() if line.startswith(b"data: {")]
    assert len(texts) == 33  # 32 tokens and the final chunk with finish_reason "length"
    assert b'"finish_reason": "length"' in texts[-1]


def test_the_shipped_hypothesis_runs_end_to_end_on_a_real_server_and_audits_clean(workdir, tiny_model):
    """`python -m framework run hypothesis=llamacpp_threads backend=llamacpp`: a verdict from real measurements."""
    (workdir / "models").mkdir()
    shutil.copy(tiny_model, workdir / "models" / "tiny-llama.gguf")
    out = framework("run", "hypothesis=llamacpp_threads", "backend=llamacpp", cwd=workdir)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    record = ledger_records(workdir / "verdicts.jsonl")[-1]
    assert record["backend"] == "llamacpp" and "backend: llamacpp" in out.stdout
    # whatever the hardware says, every prediction was judged on measured data
    assert all(p["estimate"] is not None and p["ci"] for p in record["predictions"]), record["predictions"]
    assert {c["launches"]["ok"] for c in record["conditions"]} == {3}
    run_dir = Path(record["run_dir"])
    rows = [r for r in ledger_records(run_dir / "trials.jsonl") if r["kind"] == "request"]
    assert rows and all(r["ok"] and r["completion_tokens"] == 64 for r in rows)
    argv = next(r["argv"] for r in ledger_records(run_dir / "trials.jsonl") if r["kind"] == "launch")
    assert argv[1:3] == ["-m", "llama_cpp.server"] and "--interrupt_requests" in argv
    env = record["environment"]
    assert env["server_version"] == "0.3.36" and env["model"]["bytes"] == tiny_model.stat().st_size
    release = record["analysis"]["release"]
    assert release["launches"] == 12 and release["not_released_in_time"] == 0
    audit = framework("audit", cwd=workdir)
    assert audit.returncode == 0, audit.stdout[-2000:] + audit.stderr[-2000:]


def test_the_command_backend_measures_any_openai_server(workdir, tiny_model):
    """`backend=command` with an argv template: llama-cpp-python's server as an arbitrary OpenAI server."""
    _workdir_with_model(workdir, tiny_model)
    (workdir / "hyp").mkdir()
    (workdir / "hyp" / "one_server.yaml").write_text(starts_hypothesis(
        "one_server", "An OpenAI-compatible server started from an argv template starts and serves.",
        "tiny_llama_cpu", launches=1, requests=2))
    argv = f'[{sys.executable},-m,llama_cpp.server,--model,"{{model}}",--host,"{{host}}",--port,"{{port}}"]'
    out = framework("run", "hypothesis=one_server", "backend=command", f"backend.argv={argv}",
                    "backend.health_path=/v1/models", f"paths.hypotheses={workdir / 'hyp'}",
                    f"paths.experiments={workdir / 'exp'}", cwd=workdir)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    record = ledger_records(workdir / "verdicts.jsonl")[-1]
    assert record["backend"] == "command" and record["verdict"] == "supported"
    rows = [r for r in ledger_records(Path(record["run_dir"]) / "trials.jsonl") if r["kind"] == "request"]
    assert len(rows) == 2 and all(r["ok"] and r["endpoint"] == "completions" for r in rows)


def test_the_shipped_search_runs_on_a_real_server_and_audits_clean(workdir, tiny_model):
    """`python -m framework search hypothesis=llamacpp_search backend=llamacpp`: every candidate a real llama.cpp
    server, the exploration recorded as exploratory, the confirmation registered first and run on fresh launches;
    whatever the hardware says, the verdict is drawn from measured data and its link to the search audits."""
    (workdir / "models").mkdir()
    shutil.copy(tiny_model, workdir / "models" / "tiny-llama.gguf")
    out = framework("search", "hypothesis=llamacpp_search", "backend=llamacpp", "run_dir=s", cwd=workdir)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    summary = json.loads((workdir / "s" / "search.json").read_text())
    # at most its budget of 6, fewer than the grid's 8: since issue 35 the race stops with the leader
    # alone instead of re-launching it, so a search whose exploration ends early spends less than its budget
    assert summary["backend"] == "llamacpp" and summary["launches_spent"] <= 6 < summary["grid_launches"] == 8
    assert summary["chosen"] and all(len(c["launch_ids"]) >= 2 for c in summary["candidates"] if not c["failed"])
    kinds = [r["kind"] for r in ledger_records(workdir / "verdicts.jsonl")]
    if summary.get("confirmation_skipped"):  # the hardware chose the reference: nothing to confirm, and it says so
        assert kinds == ["exploration"] and "its own reference" in summary["confirmation_skipped"]
        assert framework("audit", cwd=workdir).returncode == 0
        return
    assert kinds == ["exploration", "registration", "verdict"]
    record = ledger_records(workdir / "verdicts.jsonl")[-1]
    assert record["backend"] == "llamacpp" and record["search"]["id"] == summary["id"]
    assert all(p["estimate"] is not None and p["ci"] for p in record["predictions"]), record["predictions"]
    argv = next(r["argv"] for r in ledger_records(workdir / "s" / "trials.jsonl") if r["kind"] == "launch")
    assert argv[1:3] == ["-m", "llama_cpp.server"]
    audit = framework("audit", cwd=workdir)
    assert audit.returncode == 0, audit.stdout[-2000:] + audit.stderr[-2000:]
