"""Exercise solutions from one source: ``labs/<NN_lab>/solutions.py`` -> the lab's stub cells.

    python -m tools.solutions check            # every lab's exercise cells match its solutions
    python -m tools.solutions sync             # rewrite the labs' exercise cells from them
    python -m tools.solutions build --out DIR  # instructor copies: labs with solutions filled in

A solutions file is a Python script in jupytext's percent format, one cell per exercise; the
solution is marked with nbgrader's convention:

    # %% exercise="ckpt-hooks"
    def checkpoint_by_hooks(fn, x):
        "Run fn(x), keeping nothing for backward but x."
        ### BEGIN SOLUTION
        ...the answer...
        ### END SOLUTION

The lab holds the same cell with each marked region replaced by a stub (nbgrader's rule): inside a
function, ``# YOUR CODE HERE`` and ``raise NotImplementedError()``; at the top level, every name
the region assigns set to ``...``. So the student sees the exercise and never the answer, the
instructor edits one file, and ``check`` (run by the test suite) fails when the two drift apart.

In the notebook an exercise cell carries the tag ``exercise`` and the metadata ``exercise: <id>``;
the cell that grades it carries the tag ``exercise-check``; cells tagged ``setup`` (imports) are
all an exercise may rely on, so the graded cells run on their own (see ``grading_cells``).
"""

from __future__ import annotations

import argparse
import ast
import copy
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import nbformat

__all__ = [
    "LABS",
    "notebooks",
    "stub",
    "read_solutions",
    "read_solutions_text",
    "exercise_cells",
    "sync",
    "drift",
    "solved_notebook",
    "grading_cells",
    "solution",
]

LABS = Path(__file__).resolve().parent.parent / "labs"  # one folder per lab: NN_name/{NN_name.ipynb, solutions.py}
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
CELL = re.compile(r"^# %%(?P<attrs>.*)$", re.M)
EXERCISE_ATTR = re.compile(r'\bexercise="(?P<id>[\w.-]+)"')


@dataclass
class Exercise:
    id: str
    solution: str  # the cell as the instructor wrote it, markers included

    @property
    def student(self) -> str:
        return stub(self.solution, where=self.id)


def _stub_region(lines: list[str], indent: str, where: str) -> list[str]:
    if indent:
        return [f"{indent}# YOUR CODE HERE", f"{indent}raise NotImplementedError()"]
    try:
        tree = ast.parse("\n".join(lines))
    except SyntaxError as err:
        raise ValueError(f"exercise {where!r}: the solution region does not parse: {err}") from err
    names: list[str] = []
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if not isinstance(node, (ast.Assign, ast.AnnAssign)) or not all(isinstance(t, ast.Name) for t in targets):
            raise ValueError(
                f"exercise {where!r}: a top-level solution region may only assign names "
                f"(`answer = 4`); put other code inside a function the student writes"
            )
        names += [t.id for t in targets if t.id not in names]
    return [f"{n} = ...  # YOUR ANSWER HERE" for n in names]


def stub(source: str, where: str = "?") -> str:
    """The student's version of a solution cell: each BEGIN/END SOLUTION region stubbed out."""
    out: list[str] = []
    region: list[str] | None = None
    indent = ""
    for n, line in enumerate(source.splitlines(), 1):
        marker = line.strip()
        if marker == BEGIN:
            if region is not None:
                raise ValueError(f"exercise {where!r} line {n}: {BEGIN} inside another region")
            region, indent = [], line[: len(line) - len(line.lstrip())]
        elif marker == END:
            if region is None:
                raise ValueError(f"exercise {where!r} line {n}: {END} without {BEGIN}")
            out += _stub_region(region, indent, where)
            region = None
        elif region is not None:
            region.append(line[len(indent) :] if line.startswith(indent) else line)
        else:
            out.append(line)
    if region is not None:
        raise ValueError(f"exercise {where!r}: {BEGIN} is never closed by {END}")
    if BEGIN not in source:
        raise ValueError(f"exercise {where!r} has no {BEGIN} ... {END} region: nothing for the student to do")
    return "\n".join(out).rstrip("\n")


def read_solutions(path: Path) -> dict[str, Exercise]:
    """The exercises of one solutions file, by id, in file order."""
    return read_solutions_text(path.read_text(encoding="utf-8"), path.name)


def read_solutions_text(text: str, name: str) -> dict[str, Exercise]:
    """The exercises of a solutions file's text (``name``: the file, for errors), by id, in order."""
    heads = list(CELL.finditer(text))
    found: dict[str, Exercise] = {}
    for i, head in enumerate(heads):
        m = EXERCISE_ATTR.search(head.group("attrs"))
        if not m:
            continue
        body = text[head.end() + 1 : heads[i + 1].start() if i + 1 < len(heads) else len(text)].strip("\n")
        if m["id"] in found:
            raise ValueError(f"{name}: exercise {m['id']!r} appears twice")
        found[m["id"]] = Exercise(m["id"], body)
    return found


def solution(lab: str, exercise: str, names: dict, *, labs: Path | None = None) -> dict:
    """Run one exercise's solution cell (``lab``: the notebook's stem, in ``labs``, by default the
    repository's labs/) in a namespace holding ``names`` (what the lab's setup cells import) and
    return that namespace: tests feed the graders the instructor's answer itself instead of a
    copy of it. Functions defined there are sent to ranks by value, like a notebook cell's."""
    sols = read_solutions(solutions_file((labs or LABS) / lab / f"{lab}.ipynb"))
    if exercise not in sols:
        raise KeyError(f"{lab}: no exercise {exercise!r}; its exercises are {sorted(sols)}")
    namespace = {"__name__": f"solution_{exercise.replace('-', '_')}", **names}
    exec(compile(sols[exercise].solution, f"<{lab}:{exercise}>", "exec"), namespace)
    return namespace


def solutions_file(notebook: Path) -> Path:
    """A lab's solutions live beside its notebook: ``labs/NN_name/solutions.py``."""
    return Path(notebook).parent / "solutions.py"


def notebooks() -> list[Path]:
    """Every lab's notebook, in lab order: ``labs/NN_name/NN_name.ipynb``."""
    return sorted(p for p in LABS.glob("[0-9][0-9]_*/[0-9][0-9]_*.ipynb") if p.stem == p.parent.name)


def exercise_cells(nb: nbformat.NotebookNode) -> dict[str, int]:
    """Exercise id -> cell index for the lab's exercise cells."""
    out: dict[str, int] = {}
    for i, cell in enumerate(nb.cells):
        ex = cell.metadata.get("exercise")
        if ex is not None:
            if "exercise" not in cell.metadata.get("tags", []):
                raise ValueError(f"cell {i} has exercise metadata {ex!r} but not the tag 'exercise'")
            out[ex] = i
    return out


def _nbformat():
    """nbformat, imported on first use: it pulls in jsonschema (3 s on a 2-core laptop), and a rank
    that unpickles a function from a module importing ``solution`` must not pay for it."""
    import nbformat

    return nbformat


def _pair(notebook: Path) -> tuple[nbformat.NotebookNode, dict[str, Exercise], dict[str, int]]:
    nb = _nbformat().read(notebook, as_version=4)
    cells = exercise_cells(nb)
    sol_path = solutions_file(notebook)
    sols = read_solutions(sol_path) if sol_path.exists() else {}
    if set(cells) != set(sols):
        raise ValueError(
            f"{Path(notebook).name}: exercise cells {sorted(cells)} but {sol_path.name} solves {sorted(sols)}; "
            "each exercise needs one tagged cell in the lab and one solution"
        )
    return nb, sols, cells


def drift(notebook: Path) -> list[str]:
    """Exercise ids whose cell in the lab is not the stubbed solution (empty when in step)."""
    nb, sols, cells = _pair(notebook)
    return [ex for ex, i in cells.items() if nb.cells[i].source.rstrip("\n") != sols[ex].student]


def sync(notebook: Path) -> list[str]:
    """Rewrite the lab's exercise cells from its solutions file; return the ids changed."""
    nb, sols, cells = _pair(notebook)
    changed = [ex for ex, i in cells.items() if nb.cells[i].source.rstrip("\n") != sols[ex].student]
    for ex in changed:
        nb.cells[cells[ex]].source = sols[ex].student
        nb.cells[cells[ex]].outputs = []
    if changed:
        _nbformat().write(nb, notebook)
    return changed


def solved_notebook(notebook: Path) -> nbformat.NotebookNode:
    """The lab with every exercise cell holding its solution (markers kept), outputs cleared."""
    nb, sols, cells = _pair(notebook)
    nb = copy.deepcopy(nb)
    for ex, i in cells.items():
        nb.cells[i].source = sols[ex].solution
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return nb


def grading_cells(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Only the setup, exercise and exercise-check cells, in order: the exercises run on their own."""
    keep = {"setup", "exercise", "exercise-check"}
    out = copy.deepcopy(nb)
    out.cells = [c for c in out.cells if keep & set(c.metadata.get("tags", []))]
    return out


def _labs(names: list[str]) -> list[Path]:
    return [Path(n) for n in names] or [p for p in notebooks() if solutions_file(p).exists()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.solutions", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=("check", "sync", "build"))
    parser.add_argument("notebooks", nargs="*", help="labs/NN_*.ipynb (default: every lab with solutions)")
    parser.add_argument("--out", default="build/solutions", help="where `build` writes the instructor copies")
    args = parser.parse_args(argv)
    labs = _labs(args.notebooks)
    if args.command == "check":
        bad = {p.name: d for p in labs if (d := drift(p))}
        for name, ids in bad.items():
            print(f"{name}: exercise cells out of step with solutions: {ids} (run: python -m tools.solutions sync)")
        return 1 if bad else 0
    if args.command == "sync":
        for p in labs:
            print(f"{p.name}: {sync(p) or 'in step'}")
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for p in labs:
        _nbformat().write(solved_notebook(p), out / p.name)
        print(f"{out / p.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
