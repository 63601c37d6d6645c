"""The sweep summary as a person reads it: Markdown (sweep_summary.md) and a rich table."""

from __future__ import annotations

from typing import Any

from framework.present import format as fmt


def to_markdown(summary: dict[str, Any]) -> str:
    m, c = summary["multiplicity"], summary["counts"]
    out = [
        "# Sweep summary", "",
        f"{c['jobs']} jobs: {c['ok']} ok, {c['failed']} failed. "
        f"Multiplicity: {m['description']} at alpha = {m['alpha']}, over the {m['family_size']} predictions "
        f"with a p-value and, separately, over the {m['job_family_size']} jobs whose predictions all have one "
        "(a job's p-value is the largest of its predictions'). Adjustment only turns `supported` into "
        "`inconclusive`.", "",
        "| job | status | hypothesis | backend | verdict | p (largest) | p adjusted | adjusted verdict | overrides |",
        "|---:|---|---|---|---|---:|---:|---|---|",
    ]
    for r in summary["jobs"]:
        overrides = " ".join(fmt.md_code(o).replace("|", "\\|") for o in r["overrides"]) or "-"  # code spans
        out.append("| " + " | ".join([*(fmt.md_cell(str(x)) for x in (
            r["job"], r["status"], r["hypothesis"] or "-", r["backend"] or "-", r["verdict"] or "-",
            fmt.p_value(r.get("p_value")), fmt.p_value(r.get("p_adjusted")), r.get("adjusted_verdict") or "-")),
            overrides]) + " |")
    out += ["", "## Predictions", "",
            "| job | hypothesis | prediction | kind | verdict | estimate | CI | p | p adjusted | adjusted verdict |",
            "|---:|---|---|---|---|---:|---|---:|---:|---|"]
    for r in summary["jobs"]:
        for p in r["predictions"]:
            out.append("| " + " | ".join(fmt.md_cell(str(x)) for x in (
                r["job"], r["hypothesis"], p["id"], p["kind"], p["verdict"], fmt.num(p["estimate"]), fmt.ci(p["ci"]),
                fmt.p_value(p["p_value"]), fmt.p_value(p["p_adjusted"]), p["adjusted_verdict"])) + " |")
    failed = [r for r in summary["jobs"] if r["status"] == "failed"]
    if failed:
        out += ["", "## Failed jobs", ""]
        out += [f"- job {r['job']} ({fmt.md_text(' '.join(r['overrides']))}): {fmt.md_cell(str(r.get('error')))}"
                for r in failed]
    return "\n".join(out) + "\n"


_STYLE = {"supported": "green", "refuted": "red", "inconclusive": "yellow", "failed": "bold red"}


def print_summary(summary: dict[str, Any], console: Any = None) -> None:
    """The sweep as a rich table: a line per job (its overall verdict), then one per prediction."""
    from rich.console import Console
    from rich.table import Table

    if console is None:
        console = Console()
        if not console.is_terminal:  # logs and CI: do not wrap at 80 columns
            console = Console(width=160)
    m, c = summary["multiplicity"], summary["counts"]
    table = Table(title=f"Sweep summary: {c['ok']}/{c['jobs']} jobs ok; {m['method']} at alpha={m['alpha']}")
    for col in ("job", "hypothesis / prediction", "backend", "verdict", "estimate [CI]", "p", "p adj",
                "adjusted", "overrides"):
        table.add_column(col, overflow="fold")
    varying = set(summary.get("varying") or [])

    def styled(v: Any) -> str:
        return f"[{_STYLE[v]}]{v}[/]" if v in _STYLE else str(v or "-")

    for r in summary["jobs"]:
        shown = [o for o in r["overrides"] if o.partition("=")[0].lstrip("+~") in varying] or r["overrides"]
        if r["status"] != "ok":
            table.add_row(str(r["job"]), r["hypothesis"] or "-", "-", styled("failed"), r.get("error") or "-",
                          "", "", "", " ".join(shown), end_section=True)
            continue
        table.add_row(str(r["job"]), f"[bold]{r['hypothesis']}[/]", r["backend"] or "-", styled(r["verdict"]), "",
                      fmt.p_value(r.get("p_value")), fmt.p_value(r.get("p_adjusted")),
                      styled(r.get("adjusted_verdict")), " ".join(shown))
        for i, p in enumerate(r["predictions"]):
            table.add_row("", f"  {p['id']}", "", styled(p["verdict"]), f"{fmt.num(p['estimate'])} {fmt.ci(p['ci'])}",
                          fmt.p_value(p["p_value"]), fmt.p_value(p["p_adjusted"]), styled(p["adjusted_verdict"]), "",
                          end_section=i == len(r["predictions"]) - 1)
    console.print(table)
