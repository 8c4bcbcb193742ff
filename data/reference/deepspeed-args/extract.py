#!/usr/bin/env python3
"""Lists the DeepSpeed config keys at one git revision, for the sections weft's export writes.

    extract.py DEEPSPEED_CHECKOUT REVISION > config_keys.txt

Reads the sources with `git show REVISION:path` (no imports needed) and prints one key a line,
sorted:
  - `KEY`: a top-level key that DeepSpeedConfig._initialize_params (deepspeed/runtime/config.py)
    reads from the config dict, directly or in a function it hands the dict to
    (`get_scalar_param(d, KEY, ...)`, `d[KEY]`, `d.get(KEY)`, `KEY in d`);
  - `SECTION.KEY` for the sections below: the fields (and their aliases) of the pydantic model
    that parses the section, or the keys its reader class takes with get_scalar_param. DeepSpeed's
    pydantic config models forbid keys they do not declare; unknown top-level keys are ignored.
"""
import ast
import re
import subprocess
import sys

PYDANTIC_SECTIONS = {
    "zero_optimization": "DeepSpeedZeroConfig",
    "bf16": "DeepSpeedBF16Config",
    "fp16": "DeepSpeedFP16Config",
}
READER_SECTIONS = {"activation_checkpointing": ("DeepSpeedActivationCheckpointingConfig", "_initialize")}


def git(repo, *args):
    return subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True, text=True).stdout


def load(repo, rev):
    """Module-level string constants, functions and classes of every module under deepspeed/."""
    consts, funcs, classes = {}, {}, {}
    for path in git(repo, "ls-tree", "-r", "--name-only", rev, "deepspeed").split():
        if not path.endswith(".py"):
            continue
        try:
            tree = ast.parse(git(repo, "show", f"{rev}:{path}"))
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                for t in node.targets:
                    if isinstance(t, ast.Name):
                        consts.setdefault(t.id, set()).add(node.value.value)
            elif isinstance(node, ast.FunctionDef):
                funcs.setdefault(node.name, []).append(node)
            elif isinstance(node, ast.ClassDef):
                classes.setdefault(node.name, []).append(node)
    return consts, funcs, classes


def key_values(node, consts):
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.Name):
        return consts.get(node.id, set())
    return set()


def is_name(node, name):
    return isinstance(node, ast.Name) and node.id == name


def keys_read(fn, top, consts):
    """Keys read from the dict bound to the name `top` inside function fn."""
    keys = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            f = node.func
            if getattr(f, "id", "") == "get_scalar_param" and len(node.args) >= 2 and is_name(node.args[0], top):
                keys |= key_values(node.args[1], consts)
            if isinstance(f, ast.Attribute) and f.attr == "get" and is_name(f.value, top) and node.args:
                keys |= key_values(node.args[0], consts)
        elif isinstance(node, ast.Subscript) and is_name(node.value, top):
            keys |= key_values(node.slice, consts)
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.In, ast.NotIn)):
            right = node.comparators[0]
            if isinstance(right, ast.Call) and isinstance(right.func, ast.Attribute) and right.func.attr == "keys":
                right = right.func.value
            if is_name(right, top):
                keys |= key_values(node.left, consts)
    return keys


def callees(fn, top, funcs, classes):
    """(function, parameter name) for each call in fn that passes the dict `top` positionally."""
    out = []
    for node in ast.walk(fn):
        if not isinstance(node, ast.Call):
            continue
        name = getattr(node.func, "id", getattr(node.func, "attr", ""))
        for i, a in enumerate(node.args):
            if not is_name(a, top):
                continue
            targets = [(f, i) for f in funcs.get(name, [])]
            for c in classes.get(name, []):
                targets += [(m, i + 1) for m in c.body if isinstance(m, ast.FunctionDef) and m.name == "__init__"]
            for f, pos in targets:
                params = [p.arg for p in f.args.args]
                if pos < len(params):
                    out.append((f, params[pos]))
    return out


def top_level_keys(consts, funcs, classes):
    init = next(m for c in classes["DeepSpeedConfig"] for m in c.body
                if isinstance(m, ast.FunctionDef) and m.name == "_initialize_params")
    keys, seen, todo = set(), set(), [(init, "param_dict")]
    while todo:
        fn, top = todo.pop()
        if (id(fn), top) in seen:
            continue
        seen.add((id(fn), top))
        keys |= keys_read(fn, top, consts)
        todo += callees(fn, top, funcs, classes)
    return keys


def model_fields(cls, classes):
    """Field names and aliases of a pydantic model class, base classes included."""
    keys = set()
    for base in cls.bases:
        for b in classes.get(getattr(base, "id", ""), []):
            keys |= model_fields(b, classes)
    for stmt in cls.body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        a = stmt.annotation.value if isinstance(stmt.annotation, ast.Subscript) else stmt.annotation
        if getattr(a, "id", "") == "ClassVar" or stmt.target.id.startswith("_"):
            continue
        keys.add(stmt.target.id)
        if isinstance(stmt.value, ast.Call) and getattr(stmt.value.func, "id", "") == "Field":
            for k in stmt.value.keywords:
                if k.arg == "alias" and isinstance(k.value, ast.Constant):
                    keys.add(k.value.value)
    return keys


def main():
    repo, rev = sys.argv[1], sys.argv[2]
    consts, funcs, classes = load(repo, rev)
    lines = set(top_level_keys(consts, funcs, classes))
    for section, model in PYDANTIC_SECTIONS.items():
        (cls,) = classes[model]
        lines |= {f"{section}.{k}" for k in model_fields(cls, classes)}
    for section, (cls_name, method) in READER_SECTIONS.items():
        (cls,) = classes[cls_name]
        fn = next(m for m in cls.body if isinstance(m, ast.FunctionDef) and m.name == method)
        top = fn.args.args[1].arg
        lines |= {f"{section}.{k}" for k in keys_read(fn, top, consts)}
    # A constant name defined with different values in different modules resolves to all of them;
    # only the values that look like keys are kept.
    for line in sorted(k for k in lines if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?", k)):
        print(line)


if __name__ == "__main__":
    main()
