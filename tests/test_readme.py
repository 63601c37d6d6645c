"""The README's examples run as written.

An example is marked runnable by a line `<!-- runnable -->` (or `<!-- runnable: e2e -->` for one that takes more
than a few seconds: it runs in the e2e tier) just before its fenced block:

- a ```bash block runs with `bash -e -o pipefail` in a fresh directory that sees the checkout's hypotheses/ and
  experiments/, with `python` this interpreter and the checkout on PYTHONPATH, and must exit 0;
- a ```yaml block is a whole hypothesis file: written under its `name` and passed to `python -m framework validate`.
"""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from cli_helpers import ROOT, framework, no_servers_left, run_env

from framework.core.spec import load_experiment, load_hypothesis
from framework.servers.sim.args import parse_server_args

README = ROOT / "README.md"
MARK = re.compile(r"^<!-- runnable(?:: (?P<tier>e2e))? -->$")
FENCE = re.compile(r"^```(?P<lang>\w+)\s*$")


@dataclass(frozen=True)
class Example:
    line: int  # of the block's first line of code, 1-based
    lang: str
    text: str
    e2e: bool


def examples(text: str) -> list[Example]:
    """Every marked block; a mark not followed by a ```bash or ```yaml block is an error."""
    lines = text.splitlines()
    found = []
    for i, line in enumerate(lines):
        m = MARK.match(line.strip())
        if not m:
            continue
        fence = FENCE.match(lines[i + 1]) if i + 1 < len(lines) else None
        if not fence or fence.group("lang") not in ("bash", "yaml"):
            raise ValueError(f"README.md:{i + 1}: a runnable mark must come just before a ```bash or ```yaml block")
        end = next((j for j in range(i + 2, len(lines)) if lines[j].startswith("```")), None)
        if end is None:
            raise ValueError(f"README.md:{i + 2}: the runnable block is never closed")
        found.append(Example(i + 3, fence.group("lang"), "\n".join(lines[i + 2:end]) + "\n", m.group("tier") == "e2e"))
    return found


EXAMPLES = examples(README.read_text(encoding="utf-8"))


def _params() -> list:
    return [pytest.param(ex, id=f"README.md:{ex.line}-{ex.lang}", marks=[pytest.mark.e2e] if ex.e2e else [])
            for ex in EXAMPLES]


def _workdir(tmp_path: Path) -> Path:
    """A new user's project directory: the checkout's hypotheses and experiments, and a `python` on PATH."""
    for kind in ("hypotheses", "experiments"):
        (tmp_path / kind).symlink_to(ROOT / kind, target_is_directory=True)
    bin_dir = tmp_path / ".bin"
    bin_dir.mkdir()
    python = bin_dir / "python"  # a script, not a link: a link would lose the interpreter's virtual environment
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    return tmp_path


def _every_condition_starts_on_the_sim(path: Path, line: int) -> None:
    """SGLang's (and the sim's) start-up resolution accepts every condition's flags: validate does not start a
    server, and a flag combination SGLang rejects (EAGLE-3 steps without --speculative-eagle-topk) only fails at
    launch. Checked for hypotheses on SGLang's flags."""
    h = load_hypothesis(path)
    experiment = load_experiment(ROOT / "experiments" / f"{h.experiment}.yaml")
    if experiment.flags != "sglang":
        return
    base = ["--model-path", experiment.model_path, "--tp-size", str(experiment.tp_size), *experiment.server_args,
            *h.server_args]
    for levels in itertools.product(*(f.levels.items() for f in h.factors.values())):
        argv = base + [arg for _, level in levels for arg in level.server_args]
        try:
            parse_server_args([str(a) for a in argv], raise_errors=True)
        except Exception as exc:  # any refusal (SystemExit is not one: raise_errors) is the finding
            where = ", ".join(name for name, _ in levels)
            pytest.fail(f"README.md:{line}: condition {where} would not start: {exc}")


def test_the_marks_are_read_as_documented() -> None:
    text = ("<!-- runnable -->\n```bash\necho a\n```\nprose\n<!-- runnable: e2e -->\n```yaml\nname: x\n```\n"
            "`<!-- runnable -->` in prose is no mark\n```bash\nnot marked\n```\n")
    assert examples(text) == [Example(3, "bash", "echo a\n", False), Example(8, "yaml", "name: x\n", True)]
    with pytest.raises(ValueError, match="README.md:1: a runnable mark"):
        examples("<!-- runnable -->\n```text\nx\n```\n")


def test_the_readme_marks_its_quick_examples_and_a_whole_run() -> None:
    assert {(ex.lang, ex.e2e) for ex in EXAMPLES} >= {("bash", False), ("yaml", False), ("bash", True)}


@pytest.mark.parametrize("example", _params())
def test_a_runnable_readme_example_runs_as_written(example: Example, tmp_path: Path) -> None:
    workdir = _workdir(tmp_path)
    if example.lang == "yaml":
        name = yaml.safe_load(example.text)["name"]
        mine = workdir / "readme"
        mine.mkdir()
        (mine / f"{name}.yaml").write_text(example.text, encoding="utf-8")
        out = framework("validate", f"readme/{name}.yaml", cwd=workdir, timeout=120)
        assert out.returncode == 0, f"README.md:{example.line}: validate refused it:\n{out.stdout}{out.stderr}"
        assert "0 with problems" in out.stdout, out.stdout
        _every_condition_starts_on_the_sim(mine / f"{name}.yaml", example.line)
        return
    env = run_env(workdir, {"PATH": f"{workdir / '.bin'}{os.pathsep}{os.environ.get('PATH', '')}"})
    out = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", example.text], cwd=workdir, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, (f"README.md:{example.line}: exit {out.returncode}\n{example.text}\n"
                                 f"stdout:\n{out.stdout[-4000:]}\nstderr:\n{out.stderr[-4000:]}")
    assert no_servers_left(workdir), "a README example left a simulated server running"
