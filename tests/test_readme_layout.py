"""The README's layout section is the tree as it is: every path it names exists, and it names every
module and package of ``lab_utils`` (each lab's package with its modules), of ``tools`` and every
folder of ``tests``. Format of its code block (two spaces of indent per folder level):

    lab_utils/                   a description, after two or more spaces
      comm.py netmodel.py        several paths on one line, then the description
      labs/                      ...
        lab03_ddp/               buckets exercises figures ...   <- a lab's package: its modules
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAB_PACKAGE = re.compile(r"lab\d\d_\w+/")


def layout_block(text: str) -> list[str]:
    section = text.split("\n## Layout", 1)[1]
    return section.split("```", 2)[1].splitlines()[1:]


def listed(lines: list[str]) -> dict[Path, set[str]]:
    """{folder: the names listed under it} (a module by its file name, a folder with its slash)."""
    out: dict[Path, set[str]] = {Path("."): set()}
    stack: list[Path] = [Path(".")]
    for line in lines:
        if not line.strip():
            continue
        depth = (len(line) - len(line.lstrip())) // 2
        parts = re.split(r"\s{2,}", line.strip(), maxsplit=1)
        head, desc = parts[0], parts[1] if len(parts) > 1 else ""
        del stack[depth + 1 :]
        parent = stack[depth]
        names = head.split()
        out.setdefault(parent, set()).update(names)
        folders = [n for n in names if n.endswith("/")]
        if folders:
            here = parent / folders[-1].rstrip("/")
            stack.append(here)
            if len(names) == 1 and LAB_PACKAGE.fullmatch(names[0]):
                out[here] = {f"{m}.py" for m in desc.split()} | {"__init__.py"}
    return out


def children(folder: Path) -> set[str]:
    """What a layout lists of a folder: its modules and its packages (or plain folders)."""
    return {
        p.name + ("/" if p.is_dir() else "")
        for p in folder.iterdir()
        if not p.name.startswith((".", "__pycache__")) and (p.is_dir() or p.suffix == ".py")
    }


LISTED = listed(layout_block((ROOT / "README.md").read_text(encoding="utf-8")))


def test_every_listed_path_exists():
    missing = [str(folder / n) for folder, names in LISTED.items() for n in names if not (ROOT / folder / n).exists()]
    assert not missing, f"the README's layout names paths that do not exist: {missing}"


def test_the_package_tools_and_tests_are_listed_whole():
    for folder in (Path("lab_utils"), Path("lab_utils/labs"), Path("tools"), Path("tests")):
        want = children(ROOT / folder) - {"__init__.py"}
        if folder == Path("tests"):
            want = {n for n in want if n.endswith("/")}
        got = LISTED.get(folder, set()) - {"__init__.py"}
        assert want <= got, f"{folder}/ in the README's layout lacks {sorted(want - got)}"


def test_each_lab_package_is_listed_with_its_modules():
    for package in sorted((ROOT / "lab_utils" / "labs").glob("lab[0-9][0-9]_*")):
        rel = package.relative_to(ROOT)
        assert LISTED.get(rel) == children(package), (rel, sorted(children(package) ^ LISTED.get(rel, set())))


def test_the_parser_reads_nesting_and_lab_lines():
    got = listed(["a/  x", "  b.py c/  y", "    d.py  z", "  lab01_x/  one two", "e/"])
    assert got[Path(".")] == {"a/", "e/"} and got[Path("a")] == {"b.py", "c/", "lab01_x/"}
    assert got[Path("a/c")] == {"d.py"} and got[Path("a/lab01_x")] == {"one.py", "two.py", "__init__.py"}
