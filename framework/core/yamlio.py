"""YAML for user files, bounded: size, nesting depth and alias expansion are limited, duplicate keys refused.

A hypothesis file is small (a few KB); a hostile or broken one must fail fast with one line, not
cost minutes and gigabytes or end in a 3,000-line RecursionError. Limits (documented in the README):

- `MAX_BYTES` of text (256 KiB; the file is stored verbatim in every verdict record);
- `MAX_DEPTH` levels of nested mappings and sequences (50);
- `MAX_NODES` scalars, mappings and sequences once every alias is expanded (100,000): a "billion
  laughs" alias bomb is refused while it is still a small graph, before anything walks it;
- a key that appears twice in one mapping is an error (YAML says keys are unique; PyYAML keeps the
  last one silently).

YAML 1.2 booleans: only true/false. `on`, `off`, `yes`, `no` stay strings (level names).
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, SequenceNode

from framework.errors import YamlProblem

MAX_BYTES = 256 * 1024
MAX_DEPTH = 50
MAX_NODES = 100_000


def _at(node: Node) -> str:
    return f"line {node.start_mark.line + 1}, column {node.start_mark.column + 1}"


class Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 booleans, a depth limit and no duplicate keys."""

    _depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:  # type: ignore[override]
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise YamlProblem(f"line {mark.line + 1}, column {mark.column + 1}",
                                  f"nested more than {MAX_DEPTH} levels deep")
            return super().compose_node(parent, index)  # type: ignore[arg-type]
        finally:
            self._depth -= 1

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:  # type: ignore[override]
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:
                continue  # an unhashable key: the base class reports it
            if duplicate:
                raise YamlProblem(_at(key_node), f"duplicate key {key!r}")
        return super().construct_mapping(node, deep=deep)


Loader.yaml_implicit_resolvers = {
    key: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for key, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.copy().items()
}
Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


def expanded_size(root: Node, limit: int = MAX_NODES) -> int:
    """Nodes in the tree once aliases are expanded (shared nodes counted at every use), up to `limit` + 1."""
    sizes: dict[int, int] = {}

    def size(node: Node) -> int:
        if id(node) in sizes:
            return sizes[id(node)]
        sizes[id(node)] = limit + 1  # a cycle (a recursive alias) counts as too large
        total = 1
        if isinstance(node, SequenceNode):
            children = node.value
        elif isinstance(node, MappingNode):
            children = [n for pair in node.value for n in pair]
        else:
            children = []
        for child in children:
            total += size(child)
            if total > limit:
                break
        sizes[id(node)] = min(total, limit + 1)
        return sizes[id(node)]

    return size(root)


def flow_depth_problem(text: str) -> YamlProblem | None:
    """Flow collections (`[[[...`) nested deeper than MAX_DEPTH, found by one pass over the text.

    PyYAML's scanner looks ahead through every open flow level (quadratic time: 20,000 brackets take
    seconds), so this is checked before parsing. Brackets inside quotes and comments do not count.
    """
    depth, quote, line, col = 0, "", 1, 0
    comment = False
    for ch in text:
        col += 1
        if ch == "\n":
            line, col, comment, quote = line + 1, 0, False, ""  # an apostrophe in a plain scalar ends here
            continue
        if comment:
            continue
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "#":
            comment = True
        elif ch in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return YamlProblem(f"line {line}, column {col}", f"nested more than {MAX_DEPTH} levels deep")
        elif ch in "]}":
            depth = max(0, depth - 1)
    return None


def load(text: str) -> Any:
    """Parse one YAML document within the limits; YamlProblem (or yaml.YAMLError for syntax) otherwise."""
    size = len(text.encode("utf-8", errors="surrogateescape"))
    if size > MAX_BYTES:
        raise YamlProblem("yaml", f"the file has {size:,} bytes; at most {MAX_BYTES:,} are allowed")
    problem = flow_depth_problem(text)
    if problem:
        raise problem
    loader = Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if expanded_size(node) > MAX_NODES:
            raise YamlProblem("yaml", f"more than {MAX_NODES:,} values once its aliases are expanded "
                                      f"(an alias bomb?)")
        return loader.construct_document(node)
    finally:
        loader.dispose()
