"""Both sides of every exercise, for any lab that has one (no test code per exercise):

- as shipped, the lab's exercise cells are the stubbed solutions (one source, no drift), and the
  stored run of each check cell says "not attempted" and shows no ✓ (nbval re-runs the lab and
  compares, so a fresh run says the same);
- with the solutions filled in, every check prints ✓, a wrong exercise 1 prints ✗ with a hint
  and exercise 2's stub still prints ○: run in each lab's own nbval kernel (``solved_cells.py``);
- every lab has at least three exercises in which the student writes code;
- each check cell calls the grader of the exercise above it, known by the exercise's id.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import nbformat
import pytest

from lab_utils.checks import FAILED, NOT_ATTEMPTED, PASSED
from tools import solutions

LABS = solutions.notebooks()
MIN_CODE_EXERCISES = 3


def _tags(cell) -> set[str]:
    return set(cell.metadata.get("tags", []))


def _text(cell) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")


@pytest.mark.parametrize("lab", LABS, ids=lambda p: p.stem)
def test_lab_has_code_exercises(lab: Path):
    sols = solutions.read_solutions(solutions.solutions_file(lab))
    # A code exercise stubs a function body (an indented region) rather than a value to predict.
    code = [ex for ex in sols.values() if "raise NotImplementedError()" in ex.student]
    assert len(code) >= MIN_CODE_EXERCISES, (
        f"{lab.name}: {len(code)} exercises where the student writes code ({sorted(e.id for e in code)}); "
        f"every lab needs at least {MIN_CODE_EXERCISES}"
    )


@pytest.mark.parametrize("lab", LABS, ids=lambda p: p.stem)
def test_exercise_cells_are_the_stubbed_solutions(lab: Path):
    assert solutions.drift(lab) == [], "run: python -m tools.solutions sync"


@pytest.mark.parametrize("lab", LABS, ids=lambda p: p.stem)
def test_shipped_lab_says_not_attempted(lab: Path):
    nb = nbformat.read(lab, as_version=4)
    cells = solutions.exercise_cells(nb)
    checks = [c for c in nb.cells if "exercise-check" in _tags(c)]
    assert len(checks) == len(cells), f"{lab.name}: {len(cells)} exercises but {len(checks)} check cells"
    for cell in checks:
        out = _text(cell)
        assert NOT_ATTEMPTED in out and "not attempted" in out, f"stored check says {out!r}"
        assert PASSED not in out and FAILED not in out, f"a shipped exercise shows a verdict: {out!r}"


def test_a_solution_runs_on_its_own_for_the_graders_tests():
    ns = solutions.solution("00_setup_check", "setup-mean", {})
    assert callable(ns["mean_across_ranks"]) and ns["mean_across_ranks"].__module__ == "solution_setup_mean"
    with pytest.raises(KeyError, match="no exercise 'nope'"):
        solutions.solution("00_setup_check", "nope", {})


PACKAGE = {p.stem: p for p in Path(__file__).resolve().parents[2].glob("lab_utils/labs/lab[0-9][0-9]_*")}


@pytest.mark.parametrize("lab", LABS, ids=lambda p: p.stem)
def test_each_check_cell_calls_its_exercises_grader(lab: Path):
    """The notebook numbers its exercises; the library knows each grader by the exercise's id only."""
    (package,) = [name for name in PACKAGE if name[3:5] == lab.stem[:2]]
    graders = importlib.import_module(f"lab_utils.labs.{package}.exercises")
    nb = nbformat.read(lab, as_version=4)
    exercise, pairs = None, []
    for cell in nb.cells:
        if "exercise" in _tags(cell):
            exercise = cell.metadata["exercise"]
        elif "exercise-check" in _tags(cell):
            (name,) = re.findall(r"exercises\.(check_\w+)\(", cell.source)
            pairs.append((exercise, getattr(graders, name).exercise))
    assert pairs and all(want == got for want, got in pairs), pairs
