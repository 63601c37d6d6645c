"""Reports of a run, a multirun and a ledger: Markdown plus self-contained HTML with embedded figures."""

from __future__ import annotations

import base64
import json
import re
import warnings
from pathlib import Path

import pytest
from records_fixtures import make_run

from framework.present import report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _embedded_pngs(page: str) -> dict[str, bytes]:
    return {alt: base64.b64decode(data) for alt, data in
            re.findall(r'<img alt="([^"]+)" src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)}


def test_run_directory_report(tmp_path: Path) -> None:
    make_run(tmp_path / "outputs", "run", tmp_path / "verdicts.jsonl")
    run = tmp_path / "outputs" / "run"
    written = report.write_report(run)
    md, page = run / "report.md", run / "report.html"
    assert written[:2] == [md, page]
    html = page.read_text()
    pngs = _embedded_pngs(html)
    assert set(pngs) == {"forest", "launches"}
    assert all(p.startswith(PNG_MAGIC) and len(p) > 5000 for p in pngs.values())
    assert 'class="banner">backend: sim' in html and "not from hardware" in html
    assert "src=\"http" not in html and "<script" not in html  # self-contained
    for pid in ("neutral_for_baseline", "helps_eagle3", "helps_eagle3_more_than_baseline"):
        assert pid in html
    assert "within ±3% (equivalence)" in html and "&gt; 1.10" in html
    text = md.read_text()
    assert "**backend: sim**" in text and "](report_figures/forest.png)" in text
    assert (run / "report_figures" / "forest.png").read_bytes() == pngs["forest"]


def test_sequential_run_shows_the_trajectory(tmp_path: Path) -> None:
    looks = []
    for k, (est, half) in enumerate([(1.70, 0.2), (1.76, 0.08), (1.78, 0.03)], start=1):
        looks.append({"look": k, "launches_per_condition": 2 * k, "stop": k == 3, "reason": "r",
                      "predictions": [{"id": "helps_eagle3", "kind": "increase", "verdict": "inconclusive",
                                       "estimate": est, "ci": [est - half, est + half], "reason": "r"}]})
    make_run(tmp_path, "run", tmp_path / "verdicts.jsonl",
             extra_analysis={"stopping": {"sequential": True, "looks": looks, "reason": "all decided at look 3"}})
    report.write_report(tmp_path / "run")
    html = (tmp_path / "run" / "report.html").read_text()
    assert set(_embedded_pngs(html)) == {"forest", "launches", "looks"}
    assert "Sequential looks" in html and "all decided at look 3" in html


def test_first_looks_with_astronomical_intervals_are_drawn_clipped() -> None:
    # look 1 of a sequential run: 2 launches at a nominal level of 1e-5 give bounds like 1e-283 .. 1e283
    record = {"backend": "sim", "predictions": [], "analysis": {"stopping": {"looks": [
        {"look": 1, "launches_per_condition": 2,
         "predictions": [{"id": "helps_eagle3", "estimate": 1.86, "ci": [2.6e-283, 1.3e283]}]},
        {"look": 2, "launches_per_condition": 4,
         "predictions": [{"id": "helps_eagle3", "estimate": 1.84, "ci": [1.66, 2.02]}]}]}}}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib overflowed on such bounds before they were clipped
        png = report.trajectory_plot(record)
    assert png is not None and png.startswith(PNG_MAGIC)


def test_multirun_directory_report_with_sweep_summary(tmp_path: Path) -> None:
    from framework.analysis.sweep import summarize
    from framework.run.sweep import SUMMARY_JSON

    sweep = tmp_path / "multirun"
    led = tmp_path / "verdicts.jsonl"
    recs = [make_run(sweep, str(i), led, seed=i) for i in range(2)]
    overrides = [["hypothesis=eagle3_allreduce", f"design.seed={i}"] for i in range(2)]
    (sweep / SUMMARY_JSON).write_text(json.dumps(summarize(recs, overrides)))
    written = report.write_report(sweep)
    html = written[1].read_text()
    assert written[1] == sweep / "report.html"
    assert "Sweep summary" in html and "design.seed=1" in html and "Holm" in html
    assert {"job0-forest", "job1-forest"} <= set(_embedded_pngs(html))
    assert "backend: sim" in html


def test_ledger_report(tmp_path: Path) -> None:
    led = tmp_path / "verdicts.jsonl"
    make_run(tmp_path / "outputs", "a", led, seed=1)
    make_run(tmp_path / "outputs", "b", led, seed=2)
    written = report.write_report(led)
    assert written[:2] == [tmp_path / "verdicts.report.md", tmp_path / "verdicts.report.html"]
    html = written[1].read_text()
    assert {"r1-forest", "r2-forest", "r1-launches", "r2-launches"} <= set(_embedded_pngs(html))


def test_bad_paths_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from framework.cli import main

    assert main(["report", str(tmp_path / "missing")]) == 2
    assert main(["report", str(tmp_path)]) == 2  # an empty directory is neither kind
    assert "error:" in capsys.readouterr().err  # errors on stderr


def test_forest_plot_without_thresholds_still_renders() -> None:
    rec = {"backend": "sglang", "verdict": "inconclusive", "hypothesis": {"name": "x"},
           "predictions": [{"id": "p", "kind": "increase", "verdict": "inconclusive", "estimate": 1.02,
                            "ci": [0.97, 1.08]},
                           {"id": "l", "kind": "launches", "verdict": "supported", "estimate": None, "ci": None}]}
    png = report.forest_plot(rec)
    assert png is not None and png.startswith(PNG_MAGIC)
    assert report.forest_plot({**rec, "predictions": rec["predictions"][1:]}) is None


def test_the_committed_two_machine_gpu_record_shows_the_next_machine_and_why_it_is_not_useful() -> None:
    """docs/results/gpu's gpu_cuda_graphs record over 2 H200s (rules version 3, before the field existed): its
    summary shows the new-machine interval computed from the record's own per-machine contrasts."""
    import json
    from pathlib import Path

    from framework.present.report import summary_markdown

    run = Path(__file__).resolve().parents[2] / "docs" / "results" / "gpu" / "runs" / "gpu_cuda_graphs_2m"
    text = summary_markdown(json.loads((run / "verdict.json").read_text(encoding="utf-8")))
    line = next(ln for ln in text.splitlines() if ln.startswith("| speeds_up_batch1 | 90% prediction interval"))
    assert "[8.696, 9.353] (2 machines, 1 df): not useful" in line and "a useful one needs 8 machines" in line
    assert (run / "summary.md").read_text(encoding="utf-8") == text  # the committed summary is this rendering
HOSTILE = "x <img src=x onerror=alert(1)> [click](http://evil.example) ![i](http://evil.example/p.png) | **b**\n# h"


def _unsafe(md: str) -> list[str]:
    """What would render as structure: a raw tag, an unescaped link or image, a heading injected on a line."""
    found = re.findall(r"<img|(?<!\\)\]\(|^# h", md, flags=re.M)
    return found


def test_summary_and_report_markdown_escape_what_they_embed(tmp_path: Path) -> None:
    # issue 31: summary.md and report.md embedded hostile names, statements, ids and reasons raw
    record = make_run(tmp_path / "outputs", "run", tmp_path / "verdicts.jsonl")
    assert _unsafe(report.summary_markdown(record)) == []  # the honest record has nothing to escape...
    plain = report.summary_markdown(record)
    assert "neutral_for_baseline" in plain and "[0." in plain  # ...and reads as before: names, intervals
    record["hypothesis"] = {**record["hypothesis"], "name": HOSTILE, "statement": HOSTILE}
    record["predictions"][0] = {**record["predictions"][0], "id": HOSTILE, "reason": HOSTILE}
    record["analysis"] = {**record.get("analysis", {}), "stopping": {"reason": HOSTILE}}
    md = report.summary_markdown(record)
    assert _unsafe(md) == [], md
    assert "&lt;img src=x onerror=alert(1)&gt;" in md and "[click\\](http://evil.example)" in md
    lines = md.splitlines()
    row = next(ln for ln in lines if ln.startswith("| x &lt;img"))
    assert len(re.findall(r"(?<!\\)\|", row)) == 9  # the table keeps its 8 columns (9 unescaped bars)
    blocks = [report.Heading(1, HOSTILE), report.Banner(HOSTILE, HOSTILE), report.Para(HOSTILE),
              report.Table(["a", HOSTILE], [[HOSTILE, "ok"]])]
    rendered = report.render_markdown(blocks)
    assert _unsafe(rendered) == [], rendered
    pre = report.render_markdown([report.Pre("```\n" + HOSTILE)])  # literal inside a fence it cannot close
    assert pre.startswith("````\n```\n") and pre.endswith("\n````\n")
