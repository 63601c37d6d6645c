"""Printing verdicts: text from servers and users is shown as text, never read as rich markup."""

import io

from rich.console import Console

from framework.present.progress import print_verdict_table


def test_reasons_with_brackets_print_verbatim():
    record = {
        "hypothesis": {"name": "h[1]"}, "verdict": "refuted", "backend": "sim",
        "conditions": [{"levels": {"stack": "cuda12_8"}, "launches": {"ok": 0, "failed": 2},
                        "metric": {"name": "decode_tok_s", "mean": None}}],
        "predictions": [{"id": "p", "kind": "launches", "verdict": "refuted", "estimate": 0.0, "ci": None,
                         "p_value": None, "reason": "log: [TP0] crashed [/x] at [9, 10]"}],
    }
    out = io.StringIO()
    print_verdict_table(Console(file=out, width=200), record)
    text = out.getvalue()
    assert "[TP0] crashed [/x] at [9, 10]" in text and "h[1]" in text and "backend: sim" in text
