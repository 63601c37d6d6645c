"""`python -m framework validate`: check every hypothesis and experiment file, print one line each."""

from __future__ import annotations

from pathlib import Path

from rich.markup import escape

from framework.core import walltime
from framework.core.spec import load_experiment, load_hypothesis
from framework.errors import EXIT_BAD_INPUT, EXIT_OK, SpecError
from framework.execution.backends import BACKENDS
from framework.present.progress import make_console
from framework.run.compose import default_time_scale
from framework.run.preflight import check_pair, size_problems
from framework.run.resolve import coverage_or_refuse, effective_design, find_file, search_dirs


def _default_files() -> list[Path]:
    files: list[Path] = []
    for kind in ("experiments", "hypotheses"):
        base = next((b for b in search_dirs(kind) if b.is_dir()), Path(kind))
        files += sorted(base.glob("*.yaml"))
    return files


def check_and_estimate(path: Path) -> tuple[str | None, str | None]:
    """(the one-line problem or None, a note on a hypothesis's wall time when its run is long)."""
    try:
        if path.parent.name == "experiments":
            load_experiment(path)
            return None, None
        h = load_hypothesis(path)
        exp_path = find_file(str(path.parent.parent / "experiments"), h.experiment)
        if not exp_path.exists():  # a file outside a project layout: the experiments run would use
            exp_path = find_file("experiments", h.experiment)
        if not exp_path.exists():
            raise SpecError(path, "experiment", f"no experiment file {exp_path}")
        exp = load_experiment(exp_path)
        check_pair(h, path, exp)
        d = effective_design(h.design, {}, h)
        sizes = size_problems(h, exp, d)
        if sizes:
            raise SpecError(path, *sizes[0])
        note = None
        if exp.flags == "sglang":  # the default backend is the sim: its check too
            coverage_or_refuse(h, path, exp, BACKENDS["sim"], allow=False)
            wall = walltime.estimate(h, exp, d, default_time_scale())
        else:
            wall = walltime.estimate(h, exp, d)
        if wall.total_s >= walltime.NOTE_S:
            needs = f"; its run needs {walltime.ALLOW_LONG}" if wall.long else ""
            note = f"{walltime.describe(wall)}{needs}"
        return None, note
    except SpecError as exc:
        return str(exc), None


def main(args: list[str]) -> int:
    console, errors = make_console(), make_console(stderr=True)
    files = [Path(a) for a in args] or _default_files()
    if not files:  # an installed package has no files of its own: say so rather than pass on nothing
        errors.print("[red]error[/red]  no experiments/*.yaml or hypotheses/*.yaml here: run from your project's "
                     "directory or name the files", soft_wrap=True, highlight=False)
        return EXIT_BAD_INPUT
    problems = 0
    for path in files:
        problem, note = check_and_estimate(path)
        if problem is None:
            console.print(f"[green]ok[/green]     {escape(str(path))}", soft_wrap=True, highlight=False)
            if note:
                console.print(f"[yellow]note[/yellow]   {escape(note)}", soft_wrap=True, highlight=False)
        else:
            problems += 1
            errors.print(f"[red]error[/red]  {escape(problem)}", soft_wrap=True, highlight=False)
    (errors if problems else console).print(f"{len(files)} file(s) checked, {problems} with problems")
    return EXIT_BAD_INPUT if problems else EXIT_OK
