"""User YAML is bounded: size, depth and alias expansion limits, duplicate keys refused; one-line errors."""

from __future__ import annotations

import time
import tracemalloc

import pytest

from framework.core import yamlio
from framework.core.spec import parse_yaml
from framework.errors import SpecError


def _bomb(levels: int) -> str:
    """The 376-byte kind: each level refers nine times to the one before (9**levels values)."""
    text = 'a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    for i in range(1, levels + 1):
        text += f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]\n"
    return text


@pytest.mark.parametrize("text,where,fragment", [
    ("name: a\nname: b\n", "line 2, column 1", "duplicate key 'name'"),
    ("f:\n  l: {x: 1, x: 2}\n", "line 2", "duplicate key 'x'"),
    (_bomb(8), "yaml", "aliases are expanded"),
    ("a: " + "[" * 20000 + "]" * 20000, "line 1", f"more than {yamlio.MAX_DEPTH} levels"),
    ("".join("  " * i + f"k{i}:\n" for i in range(200)) + "  " * 200 + "x: 1\n", "line", "levels deep"),
    ("a: " + "x" * (yamlio.MAX_BYTES + 1), "yaml", "at most 262,144"),
])
def test_hostile_yaml_is_one_line_fast_and_small(text, where, fragment):
    tracemalloc.start()
    t0 = time.process_time()
    with pytest.raises(SpecError) as info:
        parse_yaml(text, "h.yaml")
    cpu = time.process_time() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert info.value.field.startswith(where) and fragment in info.value.message, str(info.value)
    assert "\n" not in str(info.value)
    # generous bounds (the unbounded versions took seconds to minutes and hundreds of MB)
    assert cpu < 2.0 and peak < 64 * 2**20


def test_aliases_within_the_limit_and_yaml_1_2_booleans_still_work():
    data = parse_yaml("base: &b {x: 1}\nuse: *b\nlevel: on\nflag: true\n", "h.yaml")
    assert data == {"base": {"x": 1}, "use": {"x": 1}, "level": "on", "flag": True}
    assert yamlio.flow_depth_problem("s: 'a [ not a bracket'\n# [[[[\nt: [1, [2]]\n") is None
