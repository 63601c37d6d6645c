"""The fault plan: flags and plan files parse into one validated plan (the faults themselves are
exercised end to end in tests/e2e/test_fault_injection.py)."""

from __future__ import annotations

import pytest

from framework.servers.sim.args import parse_server_args
from framework.servers.sim.faults import FaultPlan


def test_no_fault_flag_means_no_plan():
    assert parse_server_args(["--model-path", "m"]).sim_faults is None


def test_flags_and_a_plan_file_combine_with_flags_winning(tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text("http_500: true\ncut_stream: 2\nrate: 0.5\n")
    got = parse_server_args(["--model-path", "m", "--sim-fault-plan", str(plan), "--sim-fault-cut-stream", "5",
                             "--sim-fault-crash-at-start"]).sim_faults
    assert got == FaultPlan(http_500=True, cut_stream=5, rate=0.5, crash_at_start=1)
    assert got.active and got.describe() == "crash_at_start=1, cut_stream=5, http_500=True, rate=0.5"
    assert not FaultPlan(rate=0.3).active


@pytest.mark.parametrize("argv,fragment", [
    (["--sim-fault-rate", "1.5"], "sim fault rate"),
    (["--sim-fault-cut-stream", "-1"], "sim fault cut_stream"),
    (["--sim-fault-plan", "/no/such/plan.yaml"], "--sim-fault-plan"),
])
def test_bad_fault_settings_exit_2_with_the_setting(capsys, argv, fragment):
    with pytest.raises(SystemExit) as exc:
        parse_server_args(["--model-path", "m", *argv])
    assert exc.value.code == 2 and fragment in capsys.readouterr().err


def test_unknown_setting_in_a_plan_file_is_refused(tmp_path, capsys):
    plan = tmp_path / "plan.yaml"
    plan.write_text("crash_sometimes: true\n")
    with pytest.raises(SystemExit):
        parse_server_args(["--model-path", "m", "--sim-fault-plan", str(plan)])
    assert "crash_sometimes" in capsys.readouterr().err
