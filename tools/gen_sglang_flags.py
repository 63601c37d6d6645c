"""Generate the simulator's SGLang flag table from SGLang's own ``server_args.py`` (not hand-typed).

Reads the source statically (``ast``; SGLang and its CUDA dependencies are never imported), and
writes ``framework/servers/sim/sglang_flags.json``: every ``parser.add_argument`` of
``ServerArgs.add_cli_args`` (option strings, dest, type, default, choices, nargs, action,
required, help) and every ``ServerArgs`` dataclass field with its default. Defaults written as
``ServerArgs.<field>`` are resolved from the dataclass; choices named by module constants are
resolved from the module; what only exists at import time (parser registries of other modules)
is recorded as ``"choices_dynamic": "<expression>"`` and accepted as a free string.

    pip download --no-deps sglang==0.5.9 -d /tmp/sgl && unzip -o /tmp/sgl/sglang-0.5.9-*.whl \\
        'sglang/srt/server_args.py' -d /tmp/sgl
    python tools/gen_sglang_flags.py /tmp/sgl/sglang/srt/server_args.py --version 0.5.9
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent.parent / "framework" / "servers" / "sim" / "sglang_flags.json"


class Unresolved(Exception):
    """An expression the static reader cannot evaluate (kept as source text)."""


def _set_evaluated(entry: dict[str, Any], kw: dict[str, ast.AST], key: str, env: dict[str, Any],
                   fields: dict[str, Any], absent: Any) -> None:
    """``entry[key]``: the keyword's value, ``absent`` when not given, or None plus the source text under
    ``<key>_dynamic`` when it is only known at run time."""
    if key not in kw:
        entry[key] = absent
        return
    try:
        entry[key] = _eval(kw[key], env, fields)
    except Unresolved:
        entry[key] = None
        entry[f"{key}_dynamic"] = ast.unparse(kw[key])


def _eval(node: ast.AST, env: dict[str, Any], fields: dict[str, Any]) -> Any:
    """Evaluate literals, module constants, ``ServerArgs.x``, list/set/tuple displays, ``+``, ``*x``."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        out: list[Any] = []
        for elt in node.elts:
            if isinstance(elt, ast.Starred):
                out.extend(_eval(elt.value, env, fields))
            else:
                out.append(_eval(elt, env, fields))
        return out
    if isinstance(node, ast.Dict):
        return {_eval(k, env, fields): _eval(v, env, fields) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        raise Unresolved(node.id)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "ServerArgs":
        if node.attr in fields:
            return fields[node.attr]
        raise Unresolved(ast.unparse(node))
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)):
        left, right = _eval(node.left, env, fields), _eval(node.right, env, fields)
        return left + right if isinstance(node.op, ast.Add) else left * right
    if isinstance(node, ast.Subscript):
        return _eval(node.value, env, fields)[_eval(node.slice, env, fields)]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval(node.operand, env, fields)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("list", "tuple", "sorted"):
        return list(_eval(node.args[0], env, fields)) if node.args else []
    raise Unresolved(ast.unparse(node))


def _module_constants(tree: ast.Module) -> dict[str, Any]:
    env: dict[str, Any] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            try:
                value = _eval(stmt.value, env, {})
            except Unresolved:
                continue
            env[stmt.targets[0].id] = sorted(value) if isinstance(stmt.value, ast.Set) else value
    return env


def _dataclass_fields(cls: ast.ClassDef, env: dict[str, Any]) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for stmt in cls.body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        name = stmt.target.id
        if stmt.value is None:
            fields[name] = None  # required (model_path)
            continue
        value = stmt.value
        if isinstance(value, ast.Call) and ast.unparse(value.func).endswith("field"):
            kw = {k.arg: k.value for k in value.keywords}
            if "default" in kw:
                value = kw["default"]
            elif "default_factory" in kw:
                fac = kw["default_factory"]
                value = fac.body if isinstance(fac, ast.Lambda) else ast.Call(fac, [], [])
        try:
            fields[name] = _eval(value, env, fields) if not (
                isinstance(value, ast.Call) and ast.unparse(value.func) in ("list", "dict")
                and not value.args) else ([] if ast.unparse(value.func) == "list" else {})
        except Unresolved:
            fields[name] = {"unresolved": ast.unparse(value)}
    return fields


TYPE_NAMES = {"int", "float", "str", "json.loads", "json_list_type", "nullable_str"}


def _flags(func: ast.FunctionDef, env: dict[str, Any], fields: dict[str, Any]) -> list[dict[str, Any]]:
    local = dict(env)
    flags = []
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            local.setdefault(node.targets[0].id, {"__dynamic__": ast.unparse(node.value)})
    for node in ast.walk(func):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"):
            continue
        options = [_eval(a, env, fields) for a in node.args]
        kw = {k.arg: k.value for k in node.keywords}
        long_opts = [o for o in options if o.startswith("--")]
        dest = ast.literal_eval(kw["dest"]) if "dest" in kw else long_opts[0][2:].replace("-", "_")
        entry: dict[str, Any] = {"dest": dest, "options": options, "lineno": node.lineno}
        action = kw.get("action")
        entry["action"] = (None if action is None else
                           action.value if isinstance(action, ast.Constant) else ast.unparse(action))
        if "type" in kw:
            t = ast.unparse(kw["type"])
            if t not in TYPE_NAMES:
                raise SystemExit(f"line {node.lineno}: unknown type {t}; teach the simulator's parser about it")
            entry["type"] = t
        else:
            entry["type"] = None
        _set_evaluated(entry, kw, "nargs", env, fields, None)
        _set_evaluated(entry, kw, "default", env, fields, False if entry["action"] == "store_true" else (
            True if entry["action"] == "store_false" else None))
        if "choices" in kw:
            try:
                choices = _eval(kw["choices"], local, fields)
                if isinstance(choices, dict) and "__dynamic__" in choices:
                    raise Unresolved(choices["__dynamic__"])
                entry["choices"] = choices
            except Unresolved as exc:
                entry["choices"] = None
                entry["choices_dynamic"] = str(exc) if "(" in str(exc) else ast.unparse(kw["choices"])
        else:
            entry["choices"] = None
        entry["required"] = bool("required" in kw and _eval(kw["required"], env, fields))
        if "const" in kw:
            entry["const"] = _eval(kw["const"], env, fields)
        help_node = kw.get("help")
        if help_node is not None:
            try:
                entry["help"] = _eval(help_node, env, fields)
            except Unresolved:
                entry["help"] = ast.unparse(help_node)
        flags.append(entry)
    flags.sort(key=lambda f: f["lineno"])
    return flags


def generate(source: Path, version: str) -> dict[str, Any]:
    text = source.read_text(encoding="utf-8")
    tree = ast.parse(text)
    env = _module_constants(tree)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ServerArgs")
    fields = _dataclass_fields(cls, env)
    func = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "add_cli_args")
    flags = _flags(func, env, fields)
    dests = [f["dest"] for f in flags]
    if len(set(dests)) != len(dests):
        dup = sorted({d for d in dests if dests.count(d) > 1})
        raise SystemExit(f"duplicate dests {dup}")
    return {
        "sglang_version": version,
        "source": "python/sglang/srt/server_args.py",
        "source_sha256": hashlib.sha256(text.encode()).hexdigest(),
        "generator": "tools/gen_sglang_flags.py",
        "allow_abbrev": True,  # argparse's default, which SGLang keeps: --tp means --tp-size
        # ServerArgs.from_cli_args copies these long-form dests into the dataclass fields
        "cli_to_field": {"tensor_parallel_size": "tp_size", "pipeline_parallel_size": "pp_size",
                         "attention_context_parallel_size": "attn_cp_size",
                         "moe_data_parallel_size": "moe_dp_size", "data_parallel_size": "dp_size",
                         "expert_parallel_size": "ep_size"},
        "fields": fields,
        "flags": flags,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("server_args_py", type=Path)
    ap.add_argument("--version", required=True)
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args()
    table = generate(a.server_args_py, a.version)
    text = json.dumps(table, indent=1, sort_keys=False) + "\n"
    a.out.write_text(text, encoding="utf-8")
    print(f"{len(table['flags'])} flags, {len(table['fields'])} ServerArgs fields -> {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
