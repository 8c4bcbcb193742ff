#!/usr/bin/env python3
"""Lists the keys of torchtitan's TOML job config at one git revision.

    extract.py TORCHTITAN_CHECKOUT REVISION > job_config.txt

Reads torchtitan/config/job_config.py with `git show REVISION:path` (no imports needed). The
sections are the fields of the JobConfig dataclass, each a dataclass whose fields are that table's
keys. Prints one key a line, sorted: `section.key`, the key's TOML type (bool, int, float, str,
list, table for a nested dataclass, other), then the values it accepts when the type is a
`Literal[...]`. torchtitan's ConfigManager refuses a TOML key that is not a field.
"""
import ast
import subprocess
import sys

CONFIG_FILE = "torchtitan/config/job_config.py"


def git(repo, *args):
    return subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True, text=True).stdout


def type_of(annotation, classes):
    """(TOML type, accepted values) of a field annotation."""
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        parts = [annotation.left, annotation.right]
        parts = [p for p in parts if not (isinstance(p, ast.Constant) and p.value is None)]
        kinds = [type_of(p, classes) for p in parts]
        if len(kinds) == 1:
            return kinds[0]
        names = {k for k, _ in kinds}
        if names == {"float", "int"}:
            return "float", []
        if "list" in names:
            return "other", []
        return "other", []
    if isinstance(annotation, ast.Name):
        if annotation.id in ("bool", "int", "float", "str"):
            return annotation.id, []
        if annotation.id in classes:
            return "table", []
        return "other", []
    if isinstance(annotation, ast.Subscript):
        head = getattr(annotation.value, "id", "")
        if head == "Literal":
            elts = annotation.slice.elts if isinstance(annotation.slice, ast.Tuple) else [annotation.slice]
            values = [e.value for e in elts if isinstance(e, ast.Constant)]
            kind = "str" if all(isinstance(v, str) for v in values) else "other"
            return kind, [str(v) for v in values]
        if head == "list":
            return "list", []
        if head == "Optional":
            return type_of(annotation.slice, classes)
    return "other", []


def main():
    repo, rev = sys.argv[1], sys.argv[2]
    tree = ast.parse(git(repo, "show", f"{rev}:{CONFIG_FILE}"))
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    lines = []
    for stmt in classes["JobConfig"].body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        section, cls_name = stmt.target.id, getattr(stmt.annotation, "id", "")
        if cls_name not in classes:
            continue
        for f in classes[cls_name].body:
            if isinstance(f, ast.AnnAssign) and isinstance(f.target, ast.Name):
                kind, values = type_of(f.annotation, classes)
                lines.append(" ".join([f"{section}.{f.target.id}", kind, *values]))
    for line in sorted(lines):
        print(line)


if __name__ == "__main__":
    main()
