"""Pure helpers of the run shell: design overrides, resumable launches."""

import pytest

from framework.core.spec import Design
from framework.errors import ConfigError
from framework.run.resolve import effective_design
from framework.run.writer import completed_launches


def test_design_overrides_apply_non_null_values_only():
    d = effective_design(Design(launches=5, alpha=0.05), {"launches": 8, "alpha": None, "sequential": True,
                                                           "block": 3, "max_launches": None})
    assert d.launches == 8 and d.alpha == 0.05 and d.sequential.enabled and d.sequential.block == 3


def test_sequential_cap_is_derived_from_the_fixed_design_unless_given():
    d = effective_design(Design(launches=9), {"sequential": True})
    assert d.sequential.max_launches == 10  # 9 x 1.033 (5 looks of 2), in whole blocks
    assert effective_design(Design(launches=9), {"sequential": True, "max_launches": 20}).sequential.max_launches == 20
    assert effective_design(Design(launches=9), {}).sequential.max_launches is None  # a fixed run has no cap


def test_bad_design_override_names_the_field():
    with pytest.raises(ConfigError) as info:
        effective_design(Design(), {"alpha": 0.7})
    assert info.value.field == "design.alpha"


def test_completed_launches_are_failures_or_fully_measured():
    rows = [
        {"kind": "launch", "launch_id": "a", "ok": False},
        {"kind": "launch", "launch_id": "b", "ok": True},
        {"kind": "request", "launch_id": "b", "warmup": True},
        {"kind": "request", "launch_id": "b", "warmup": False},
        {"kind": "request", "launch_id": "b", "warmup": False},
        {"kind": "launch", "launch_id": "c", "ok": True},
        {"kind": "request", "launch_id": "c", "warmup": False},
    ]
    assert sorted(completed_launches(rows, requests_n=2)) == ["a", "b"]
