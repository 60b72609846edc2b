"""The layout's rules, read from the code's own import statements (an AST pass, nothing imported):

- the core (``lab_utils`` outside ``lab_utils.labs``) never imports a lab's package;
- no lab's package imports another lab's package;
- ``lab_utils`` never imports ``tools`` or ``tests`` (they are not installed with it);
- the import graph of ``lab_utils`` has no cycle, type-only imports included.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "lab_utils"
DOTTED = re.compile(r"lab_utils(\.\w+)+")  # a module named in a string


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imported(path: Path, known: set[str], here: str | None = None) -> set[str]:
    """Every module ``path`` imports, anywhere in it (a function's body and TYPE_CHECKING too), and
    every module a string in it names. ``from pkg import name`` counts as importing ``pkg.name``
    when that is a module, else ``pkg``. ``here``: the module's own name (default: from its path)."""
    out = set()
    here = here or module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolved against this module's package
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for a in node.names:
                out.add(f"{base}.{a.name}" if f"{base}.{a.name}" in known else base)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and DOTTED.fullmatch(node.value):
            out.add(node.value)  # importlib.import_module("lab_utils.labs.lab03_ddp"), a lazy name
    return out


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imported(path, known) for name, path in mods.items()}


def lab_of(name: str) -> str | None:
    """``lab_utils.labs.lab03_ddp.workload`` -> ``lab03_ddp``; None for the core."""
    parts = name.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "labs" else None


def test_the_graph_is_read():
    g = graph()
    assert "lab_utils.launcher" in g["lab_utils"] and "lab_utils.memory" in g["lab_utils.memory.step"]
    labs = {lab_of(m) for m in g} - {None}
    assert len(labs) == 9, sorted(labs)


def test_the_core_never_imports_a_lab():
    """Not a lab's package, nor ``lab_utils.labs`` itself (``from lab_utils import labs`` reaches
    every lab through it); only a lab's own package imports ``lab_utils.labs`` (its ``lazy``)."""
    wrong = sorted(
        (m, i)
        for m, deps in graph().items()
        if lab_of(m) is None and m != "lab_utils.labs"
        for i in deps
        if i == "lab_utils.labs" or i.startswith("lab_utils.labs.")
    )
    assert not wrong, f"core modules importing a lab's package: {wrong}"


def test_no_lab_imports_another_lab():
    wrong = sorted(
        (m, i)
        for m, deps in graph().items()
        if lab_of(m)
        for i in deps
        if i.startswith("lab_utils.labs.") and lab_of(i) not in (None, lab_of(m))
    )
    assert not [m for m, deps in graph().items() if lab_of(m) and "lab_utils.labs" in deps and m.count(".") >= 3], (
        "a lab's module imports lab_utils.labs, through which every other lab is reached (only its __init__ may, "
        "for lazy)"
    )
    assert not wrong, f"a lab's package importing another lab's: {wrong}"


def test_the_package_imports_no_tools_and_no_tests():
    wrong = sorted((m, i) for m, deps in graph().items() for i in deps if i.split(".")[0] in ("tools", "tests"))
    assert not wrong, f"lab_utils must stand alone when installed: {wrong}"


def find_cycle(g: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for d in sorted(g.get(m, ())):
            if d not in g or d == m:
                continue
            if state.get(d) == 1:
                return path[path.index(d) :] + [d]
            if d not in state and (found := visit(d)):
                return found
        state[m] = 2
        path.pop()
        return None

    for m in sorted(g):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_no_import_cycle():
    # A package's __init__ that imports its own submodules is not a cycle by itself: a submodule
    # importing its package's __init__ back would be, and is reported.
    cycle = find_cycle(graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


@pytest.mark.parametrize(
    "g, cycle",
    [({"a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c", "a"]), ({"a": {"b"}, "b": {"x"}}, None)],
)
def test_find_cycle_finds_one_and_only_one(g, cycle):
    assert find_cycle(g) == cycle


def test_the_reader_sees_strings_and_the_labs_package(tmp_path):
    """A plausible way round the rules: reach a lab through ``lab_utils.labs`` or a module named in
    a string (``importlib``, the lazy loader). Both count as imports."""
    mod = tmp_path / "sneaky.py"
    mod.write_text(
        'import importlib\nfrom lab_utils import labs\nimportlib.import_module("lab_utils.labs.lab03_ddp")\n'
    )
    got = imported(mod, known={"lab_utils.labs", "lab_utils.labs.lab03_ddp"}, here="lab_utils.sneaky")
    assert {"lab_utils.labs", "lab_utils.labs.lab03_ddp"} <= got
