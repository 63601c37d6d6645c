"""The bisection's report: the metric along the versions as a figure, and what was found as Markdown."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from framework.analysis import bisect as an
from framework.core.spec import Hypothesis
from framework.present.bisect_report import markdown, write_bisect_report


def _summary(k: int | None) -> dict:
    h = Hypothesis.model_validate({"name": "r", "statement": "s", "experiment": "e", "bisect": {
        "threshold": 0.05, "versions": [{"name": f"v{i}"} for i in range(9)]}})
    rng = np.random.default_rng(3)
    s = an.Settings.of(h.bisect, 0.05)
    values: list[list[float]] = [[] for _ in range(9)]
    while not (st := an.replay(s, values, [0] * 9)).done:
        for v, target in st.need.items():
            while len(values[v]) < target:
                values[v].append((90.0 if k is not None and v >= k else 100.0) * math.exp(rng.normal(0, 0.005)))
    data = [an.VersionData(ids=[f"c{i}-r{j}" for j in range(len(v))], values=v) for i, v in enumerate(values)]
    return {**an.summary(h, st, data), "id": "abc"}


def test_named_report_and_figure(tmp_path: Path) -> None:
    summary = _summary(5)
    assert summary["first_bad"] == "v5"
    (tmp_path / "bisect.json").write_text(json.dumps(summary))
    md = write_bisect_report(tmp_path).read_text()
    assert "First bad version **v5**, last good v4" in md and "![metric along the versions](bisect.png)" in md
    assert md.count("| probe |") == len(summary["probed"]) == 3
    png = (tmp_path / "bisect.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000


def test_no_change_says_it_stopped_after_the_first_comparison() -> None:
    md = markdown(_summary(None))
    assert "stopped after the first comparison" in md and "| ends |" in md and "| probe |" not in md
