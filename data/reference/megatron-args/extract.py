#!/usr/bin/env python3
"""Lists the command-line flags of Megatron-LM's training scripts at one git revision.

    extract.py MEGATRON_LM_CHECKOUT REVISION [ARGUMENTS_FILE] > arguments.txt

ARGUMENTS_FILE defaults to megatron/training/arguments.py (Megatron-LM); Megatron-DeepSpeed keeps
its arguments in megatron/arguments.py.

Reads the sources with `git show REVISION:path` (no work tree and no imports needed) and prints one
flag a line, sorted: the flag, `switch` (takes no value: store_true / store_false) or `value`, then
the values it accepts when the source lists them (argparse `choices=`, or a `Literal[...]` field
type). The flags are:
  - every option string of an `add_argument(...)` call in the arguments file;
  - the flags that `ArgumentGroupFactory(Config, exclude=[...])` there derives from a dataclass
    (megatron/training/argument_utils.py): `--field-name` for each init field not excluded, the
    names in the field's `metadata["argparse_meta"]["arg_names"]` when it has them, and for a bool
    field whose default is not False (a store_false flag) `--no-field-name` and
    `--disable-field-name` instead. Fields of base classes come first, as `dataclasses.fields`
    lists them.
"""
import ast
import subprocess
import sys

ARGS_FILE = "megatron/training/arguments.py"


def git(repo, *args):
    return subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True, text=True).stdout


def class_index(repo, rev):
    """Class name -> (ClassDef, module AST) for every class under megatron/."""
    index = {}
    for path in git(repo, "ls-tree", "-r", "--name-only", rev, "megatron").split():
        if not path.endswith(".py"):
            continue
        tree = ast.parse(git(repo, "show", f"{rev}:{path}"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and is_dataclass(node):
                index.setdefault(node.name, []).append((path, node))
    return index


def is_dataclass(cls):
    for d in cls.decorator_list:
        f = d.func if isinstance(d, ast.Call) else d
        name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
        if name == "dataclass":
            return True
    return False


def resolve(index, name):
    found = index.get(name, [])
    if len(found) != 1:
        raise SystemExit(f"dataclass {name}: found {len(found)} definitions ({[p for p, _ in found]})")
    return found[0][1]


def field_call(value):
    """The `field(...)` / `dataclasses.field(...)` call of an annotated assignment, if it is one."""
    if isinstance(value, ast.Call):
        f = value.func
        name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
        if name == "field":
            return value
    return None


def is_bool(annotation):
    """bool, Optional[bool] or bool | None (the types argparse turns into store_true/false)."""
    if isinstance(annotation, ast.Name):
        return annotation.id == "bool"
    if isinstance(annotation, ast.Subscript) and getattr(annotation.value, "id", "") == "Optional":
        return is_bool(annotation.slice)
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        parts = [annotation.left, annotation.right]
        nones = [p for p in parts if isinstance(p, ast.Constant) and p.value is None]
        rest = [p for p in parts if p not in nones]
        return len(nones) == 1 and len(rest) == 1 and is_bool(rest[0])
    return False


def literal_values(annotation):
    """The values of Literal[...] or Optional[Literal[...]] (as strings); [] for any other type."""
    if isinstance(annotation, ast.Subscript):
        head = getattr(annotation.value, "id", getattr(annotation.value, "attr", ""))
        if head == "Literal":
            elts = annotation.slice.elts if isinstance(annotation.slice, ast.Tuple) else [annotation.slice]
            return [str(e.value) for e in elts if isinstance(e, ast.Constant)]
        if head == "Optional":
            return literal_values(annotation.slice)
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        return literal_values(annotation.left) or literal_values(annotation.right)
    return []


def constants(node):
    """The constant elements of a list or tuple literal, as strings."""
    if isinstance(node, (ast.List, ast.Tuple)):
        return [str(e.value) for e in node.elts if isinstance(e, ast.Constant)]
    return []


SWITCH_ACTIONS = {"store_true", "store_false", "store_const", "count"}


def is_classvar(annotation):
    a = annotation.value if isinstance(annotation, ast.Subscript) else annotation
    return getattr(a, "id", getattr(a, "attr", "")) == "ClassVar"


def dataclass_flags(index, name, exclude):
    cls = resolve(index, name)
    flags = []
    for base in cls.bases:
        base_name = getattr(base, "id", getattr(base, "attr", ""))
        if base_name in index:
            flags += dataclass_flags(index, base_name, exclude)
    for stmt in cls.body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        if is_classvar(stmt.annotation):
            continue
        field = stmt.target.id
        if field in exclude:
            continue
        call = field_call(stmt.value)
        kw = {k.arg: k.value for k in call.keywords} if call else {}
        if isinstance(kw.get("init"), ast.Constant) and kw["init"].value is False:
            continue
        default = kw.get("default") if call else stmt.value
        names = None
        switch = is_bool(stmt.annotation)
        choices = literal_values(stmt.annotation)
        meta = kw.get("metadata")
        if isinstance(meta, ast.Dict):
            for k, v in zip(meta.keys, meta.values):
                if isinstance(k, ast.Constant) and k.value == "argparse_meta" and isinstance(v, ast.Dict):
                    for k2, v2 in zip(v.keys, v.values):
                        if isinstance(k2, ast.Constant) and k2.value == "arg_names":
                            names = [e.value for e in v2.elts]
                        if isinstance(k2, ast.Constant) and k2.value == "action":
                            switch = isinstance(v2, ast.Constant) and v2.value in SWITCH_ACTIONS
                        if isinstance(k2, ast.Constant) and k2.value == "choices":
                            choices = constants(v2)
        if names is None:
            dashed = field.replace("_", "-")
            store_false = switch and not (isinstance(default, ast.Constant) and default.value is False)
            names = [f"--no-{dashed}", f"--disable-{dashed}"] if store_false else [f"--{dashed}"]
        flags += [(n, switch, [] if switch else choices) for n in names]
    return flags


def main():
    repo, rev = sys.argv[1], sys.argv[2]
    args_file = sys.argv[3] if len(sys.argv) > 3 else ARGS_FILE
    tree = ast.parse(git(repo, "show", f"{rev}:{args_file}"))
    index = None
    flags = set()
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef):
            continue
        # Local `exclude = [...]` lists, passed by name to the factory.
        local_lists = {}
        for node in ast.walk(fn):
            if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                    and isinstance(node.value, ast.List)):
                local_lists[node.targets[0].id] = [e.value for e in node.value.elts if isinstance(e, ast.Constant)]
        for node in ast.walk(fn):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr == "add_argument":
                kw = {k.arg: k.value for k in node.keywords}
                action = kw.get("action")
                switch = isinstance(action, ast.Constant) and action.value in SWITCH_ACTIONS
                choices = [] if switch else constants(kw.get("choices"))
                for a in node.args:
                    if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("-"):
                        flags.add((a.value, switch, tuple(choices)))
            if getattr(f, "id", "") == "ArgumentGroupFactory":
                index = index or class_index(repo, rev)
                exclude = []
                for k in node.keywords:
                    if k.arg == "exclude":
                        if isinstance(k.value, ast.List):
                            exclude = [e.value for e in k.value.elts]
                        elif isinstance(k.value, ast.Name):
                            exclude = local_lists[k.value.id]
                flags.update((n, sw, tuple(c)) for n, sw, c in dataclass_flags(index, node.args[0].id, set(exclude)))
    names = [n for n, _, _ in flags]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise SystemExit(f"flags defined twice with different kinds or values: {dupes}")
    for name, switch, choices in sorted(flags):
        print(" ".join([name, "switch" if switch else "value", *choices]))


if __name__ == "__main__":
    main()
