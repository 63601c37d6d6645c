"""The `bisect:` block: what a bisection may declare, refused field by field before anything starts."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from framework.core.bisect import BisectBlock
from framework.core.spec import Hypothesis


def _block(**kw):
    data = {"threshold": 0.03, "versions": [{"name": "a"}, {"name": "b"}, {"name": "c"}], **kw}
    return BisectBlock.model_validate(data)


def test_defaults_and_probe_budget() -> None:
    b = _block(versions=[{"name": f"v{i}"} for i in range(64)])
    assert b.equivalence_margin == pytest.approx(0.015)
    assert b.probe_budget() == 6  # 63 possible change points: ceil(log2 63)
    assert b.kind() == "levels" and not b.commits
    assert _block().probe_budget() == 1


@pytest.mark.parametrize(("kw", "words"), [
    ({"versions": [{"name": "a"}, {"name": "a"}, {"name": "b"}]}, "duplicate"),
    ({"margin": 0.03}, "below threshold"),
    ({"versions": [{"name": "a", "commit": "abc123"}, {"name": "b"}, {"name": "c"}]}, "every version or for none"),
    ({"versions": [{"name": "a", "commit": "abc1"}, {"name": "b", "commit": "abc2"}, {"name": "c", "commit": "abc3"}]},
     "give repo"),
    ({"repo": "."}, "no commit"),
    ({"versions": [{"name": "a"}, {"name": "b"}]}, "at least 3"),
    ({"versions": [{"name": "-x"}, {"name": "b"}, {"name": "c"}]}, "version name"),
    ({"launches": 10, "max_launches": 5}, "below launches"),
])
def test_refused(kw, words) -> None:
    with pytest.raises(ValidationError, match=words):
        _block(**kw)


def test_a_bisect_file_needs_no_factors_or_predictions() -> None:
    h = Hypothesis.model_validate({"name": "b", "statement": "s", "experiment": "e",
                                   "bisect": {"threshold": 0.05, "versions": [{"name": "a"}, {"name": "b"},
                                                                              {"name": "c"}]}})
    assert h.bisect is not None and h.factors == {} and h.predictions == []
    assert _block(versions=[{"name": "a", "python": "/x"}, {"name": "b"}, {"name": "c"}]).kind() == "packages"
