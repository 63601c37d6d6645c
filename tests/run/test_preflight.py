"""Checks before any launch: backend settings name the field and the limit, levels are checked per condition."""

from __future__ import annotations

import pytest
from cli_helpers import ROOT

from framework.core.spec import load_experiment, load_hypothesis
from framework.errors import SpecError
from framework.run.preflight import backend_settings, executable_problem, level_problems


@pytest.mark.parametrize("raw,field,fragment", [
    ({"name": "sim", "speedup": 0}, "backend.speedup", "greater than 0 (got 0)"),
    ({"name": "sim", "ready_timeout_s": "soon"}, "backend.ready_timeout_s", "valid number"),
    ({"name": "tpu"}, "backend.name", "'sim'"),
    ({"name": "sim", "colour": 1}, "backend.colour", "unknown field"),
    ({"name": "sim", "env": {"A=B": "1"}}, "backend.env", "without '='"),
    ({"name": "sim", "env": {"A": "x\0y"}}, "backend.env", "NUL"),
    ({"name": "sim", "python": "/no/such/python"}, "backend.python", "does not exist"),
    ({"name": "sim", "api_key": "short"}, "backend.api_key", "at least 8"),
    ({"name": "endpoint", "url": "???"}, "backend.url", "missing"),
    ({"name": "endpoint", "url": None}, "backend.url", "needs backend.url"),
    ({"name": "endpoint", "url": "127.0.0.1:30000"}, "backend.url", "http://HOST:PORT"),
    ({"name": "endpoint", "url": "http://h:99999"}, "backend.url", "port"),
])
def test_backend_errors_name_the_field_and_the_limit(raw, field, fragment):
    with pytest.raises(SpecError) as info:
        backend_settings(raw)
    assert info.value.field == field and fragment in info.value.message, str(info.value)
    assert "pydantic.dev" not in str(info.value) and "\n" not in str(info.value)


def test_the_shipped_hypotheses_have_no_level_problems():
    for path in sorted((ROOT / "hypotheses").glob("*.yaml")):
        h = load_hypothesis(path)
        assert level_problems(h, load_experiment(ROOT / "experiments" / f"{h.experiment}.yaml")) == []


def test_a_condition_whose_merged_workload_is_invalid_is_named():
    h = load_hypothesis(ROOT / "hypotheses" / "eagle3_allreduce.yaml")
    exp = load_experiment(ROOT / "experiments" / "rtx_pro_6000_tp8.yaml")
    # each level alone is valid over the experiment's workload; only an invalid experiment value shows per condition
    bad_exp = exp.model_copy(update={"workload": exp.workload.model_copy(update={"concurrency": 0})})
    problems = level_problems(h, bad_exp)
    assert problems and all("concurrency" in f for f, _ in problems)


def test_executables(tmp_path):
    script = tmp_path / "python"
    script.write_text("#!/bin/sh\n")
    assert "not executable" in executable_problem(str(script))
    script.chmod(0o755)
    assert executable_problem(str(script)) is None
    assert "directory" in executable_problem(str(tmp_path))
    assert executable_problem("sh") is None and "PATH" in executable_problem("no-such-interpreter-xyz")


def test_numbers_in_a_command_line_become_their_text():
    # Hydra reads backend.extra_args=[--chunked-prefill-size,8192] as a list with an int
    from framework.core.spec import Level


    b = backend_settings({"name": "sim", "extra_args": ["--chunked-prefill-size", 8192, "--x", 0.5]})
    assert b.extra_args == ["--chunked-prefill-size", "8192", "--x", "0.5"]
    assert Level.model_validate({"server_args": ["--speculative-num-steps", 3]}).server_args == [
        "--speculative-num-steps", "3"]
    with pytest.raises(SpecError):
        backend_settings({"name": "sim", "extra_args": [True]})  # true/false are not numbers: say which text


def test_a_dataset_larger_than_the_cap_is_refused_before_it_is_parsed(tmp_path):
    from framework.execution.client.plan import read_bounded

    p = tmp_path / "d.jsonl"
    p.write_text('{"prompt": "a", "output_len": 2}\n' * 10)
    assert read_bounded(p).count("\n") == 10
    with pytest.raises(ValueError, match="at most 100"):
        read_bounded(p, limit=100)


def test_a_run_directory_on_a_full_disk_is_one_line_not_hydras_traceback(tmp_path, monkeypatch):
    import shutil
    from collections import namedtuple

    from framework.run.preflight import output_dir_problem

    assert output_dir_problem(tmp_path / "outputs" / "x") is None
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(256 << 10, 256 << 10, 0))
    assert output_dir_problem(tmp_path / "outputs" / "x") == (
        f"cannot make {tmp_path / 'outputs' / 'x'}: the file system of {tmp_path} is full (0 bytes free)")
