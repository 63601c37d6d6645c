"""The suite itself: reproducible property tests (issue 15, "a suite that is green anywhere")."""

from hypothesis import settings


def test_property_tests_are_derandomized_without_a_database_or_deadline():
    assert settings.default.derandomize is True
    assert settings.default.database is None
    assert settings.default.deadline is None
