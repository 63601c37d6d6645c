"""The public face of the package is pinned: adding or removing a name is a decision, not an accident."""

from __future__ import annotations

import subprocess
import sys

import framework

PUBLIC = [
    "Analysis", "Experiment", "FrameworkError", "Hypothesis", "SpecError", "Trials", "UserError", "__version__",
    "analyze", "audit", "load_experiment", "load_hypothesis", "read_trials",
]


def test_the_public_face_is_exactly_these_names() -> None:
    assert sorted(framework.__all__) == sorted(PUBLIC)
    for name in framework.__all__:
        assert getattr(framework, name) is not None, name


def test_every_public_name_resolves_to_the_object_of_its_room() -> None:
    from framework.analysis.verdicts import analyze
    from framework.core.spec import load_hypothesis
    from framework.records.audit import audit

    assert framework.analyze is analyze and framework.load_hypothesis is load_hypothesis
    assert framework.audit is audit


def test_importing_the_package_imports_none_of_its_rooms() -> None:
    # lazy: `python -m framework.sim` and the launcher's watchdog must not pay for the statistics
    code = "import sys, framework; print(sorted(m for m in sys.modules if m.startswith('framework.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_from_framework_import_works() -> None:
    code = "from framework import load_hypothesis, analyze; print(load_hypothesis.__module__, analyze.__module__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["framework.core.spec", "framework.analysis.verdicts"]
