"""Every lab's exercises answered, inside the lab's own nbval run (no second kernel per lab).

Right after a lab's last ``setup`` cell, nbval runs these extra cells in the lab's kernel:

1. each exercise with its solution filled in, then its check cell, which must print ✓;
2. exercise 1 answered with code that raises (or a junk value), then its check: it must print ✗
   with a hint, without raising (a broken answer does not stop Run All). What each grader
   measures is proven by the lab's own tests, with plausible wrong answers
   (``tests/labs/labNN_*/test_exercises.py``);
3. exercise 2 back to its stub, then its check: it must print ○ "not attempted".

The lab's own cells then run as shipped: each exercise cell redefines its stub before its check,
so the stored outputs still say "not attempted". The exercises may rely only on the setup cells
(``solutions.grading_cells``), so this is the same state a fresh kernel running them would have.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import nbformat

from tools import solutions

_CHECK = """
import contextlib as _contextlib, io as _io
_printed = _io.StringIO()
with _contextlib.redirect_stdout(_printed):
    exec(compile({source!r}, "<check cell>", "exec"), globals())
_printed = _printed.getvalue()
print(_printed, end="")
{verdict}
"""

_PASSES = 'assert {passed!r} in _printed, "with the solutions filled in, this check did not print ✓"'
_FAILS = (
    'assert _printed.startswith({failed!r}) and "\\n  hint: " in _printed, '
    '"exercise 1 answered wrongly must print a ✗ line and a hint, not raise"'
)
_NOT_ATTEMPTED = (
    'assert {not_attempted!r} in _printed and "not attempted" in _printed, '
    '"exercise 2\'s stub must print ○ not attempted after a wrong exercise 1"'
)


def wrong(student: str) -> str:
    """An exercise cell answered with code that raises, or with a junk value: it tests that a broken
    answer prints ✗ and a hint and lets Run All go on, not what the grader measures."""
    return student.replace("raise NotImplementedError()", 'raise RuntimeError("a wrong answer")').replace(
        "...  # YOUR ANSWER HERE", "object()  # a wrong answer"
    )


def _tags(cell) -> set[str]:
    return set(cell.metadata.get("tags", []))


def extra_cells(lab: Path) -> list[tuple[str, str]]:
    """(name, source) of the cells to run after ``lab``'s setup cells, in order."""
    from lab_utils.checks import FAILED, NOT_ATTEMPTED, PASSED

    graded = [c for c in solutions.grading_cells(solutions.solved_notebook(lab)).cells if "setup" not in _tags(c)]
    checks = [c.source for c in graded if "exercise-check" in _tags(c)]
    exercises = list(solutions.read_solutions(solutions.solutions_file(lab)).values())
    cells = []
    for cell in graded:
        if "exercise" in _tags(cell):
            cells.append((f"solved {cell.metadata['exercise']}", cell.source))
        else:
            cells.append(("its check passes", _CHECK.format(source=cell.source, verdict=_PASSES.format(passed=PASSED))))
    cells += [
        (f"wrong {exercises[0].id}", wrong(exercises[0].student)),
        ("its check prints a cross", _CHECK.format(source=checks[0], verdict=_FAILS.format(failed=FAILED))),
        (f"stub {exercises[1].id}", exercises[1].student),
        (
            "its check says not attempted",
            _CHECK.format(source=checks[1], verdict=_NOT_ATTEMPTED.format(not_attempted=NOT_ATTEMPTED)),
        ),
    ]
    return cells


def insert(items: list) -> None:
    """Put each lab's extra cells, as nbval items, right after its last setup cell."""
    from nbval.plugin import IPyNbCell

    last_setup: dict[Path, object] = {}
    for item in items:
        if isinstance(item, IPyNbCell) and "setup" in _tags(item.cell):
            last_setup[Path(str(item.parent.fspath))] = item
    out = []
    for item in items:
        out.append(item)
        lab = Path(str(item.parent.fspath)) if isinstance(item, IPyNbCell) else None
        if lab is not None and last_setup.get(lab) is item and solutions.solutions_file(lab).exists():
            for n, (name, source) in enumerate(extra_cells(lab)):
                cell = nbformat.v4.new_code_cell(source)
                out.append(
                    IPyNbCell.from_parent(
                        item.parent,
                        name=f"Exercises {n:02d}: {name}",
                        cell_num=item.cell_num,
                        cell=cell,
                        options=defaultdict(bool, check=False),
                    )
                )
    items[:] = out
