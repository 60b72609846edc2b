"""Both sides of every exercise, for any lab that has one (no test code per exercise):

- as shipped, the lab's exercise cells are the stubbed solutions (one source, no drift), and the
  stored run of each check cell says "not attempted" and shows no ✓ (nbval re-runs the lab and
  compares, so a fresh run says the same);
- with the solutions filled in, the lab's setup, exercise and check cells run in a fresh kernel
  and every check prints ✓;
- every lab has at least three exercises in which the student writes code.
"""

from __future__ import annotations

import copy
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from lab_utils import solutions
from lab_utils.checks import FAILED, NOT_ATTEMPTED, PASSED

LABS = sorted(solutions.LABS.glob("[0-9][0-9]_*.ipynb"))
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
    assert solutions.drift(lab) == [], "run: python -m lab_utils.solutions sync"


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


def _wrong(student: str) -> str:
    """An exercise cell answered wrongly: the stub's body raises an error, its values are junk."""
    return student.replace("raise NotImplementedError()", 'raise RuntimeError("a wrong answer")').replace(
        "...  # YOUR ANSWER HERE", "object()  # a wrong answer"
    )


def _run_solved(lab: Path) -> tuple[list[str], list[str]]:
    """Run the lab's setup, exercise (solutions filled in) and check cells in a fresh kernel; then,
    in the same kernel, exercise 1 answered wrongly and exercise 2 back to its stub, each with its
    check cell. Returns what the check cells printed: the solved run's, then those two."""
    nb = solutions.grading_cells(solutions.solved_notebook(lab))
    sols = list(solutions.read_solutions(solutions.solutions_file(lab)).values())
    checks = [c for c in nb.cells if "exercise-check" in _tags(c)]
    after = [
        nbformat.v4.new_code_cell(_wrong(sols[0].student)),
        copy.deepcopy(checks[0]),
        nbformat.v4.new_code_cell(sols[1].student),
        copy.deepcopy(checks[1]),
    ]
    nb.cells += after
    # A check cell that raised would stop the run here (CellExecutionError): Run All would stop too.
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(lab.parent)}}).execute()
    return [_text(c) for c in checks], [_text(after[1]), _text(after[3])]


@pytest.fixture(scope="module")
def solved(request) -> dict[Path, Future]:
    """Every lab's solutions run at the smoke size, two kernels at a time: most of a kernel's
    time is start-up and waiting for ranks, so two overlap well on two cores."""
    mp = pytest.MonkeyPatch()
    mp.setenv("LAB_SIZE", "smoke")  # the kernels inherit it
    pool = ThreadPoolExecutor(max_workers=2)
    request.addfinalizer(mp.undo)
    request.addfinalizer(pool.shutdown)
    return {lab: pool.submit(_run_solved, lab) for lab in LABS}


@pytest.mark.slow
@pytest.mark.parametrize("lab", LABS, ids=lambda p: p.stem)
def test_solutions_pass_their_checks(lab: Path, solved):
    printed, _ = solved[lab].result()
    passed = [p for p in printed if PASSED in p]
    assert printed and len(passed) == len(printed), "checks that did not pass with the solutions:\n" + "\n".join(
        p for p in printed if PASSED not in p
    )


@pytest.mark.slow
@pytest.mark.parametrize("lab", LABS, ids=lambda p: p.stem)
def test_a_wrong_answer_prints_a_cross_and_run_all_goes_on(lab: Path, solved):
    _, (first, second) = solved[lab].result()
    assert first.startswith(FAILED) and "\n  hint: " in first, f"exercise 1 answered wrongly printed {first!r}"
    assert NOT_ATTEMPTED in second and "not attempted" in second, f"exercise 2's check after it printed {second!r}"


def test_a_solution_runs_on_its_own_for_the_graders_tests():
    ns = solutions.solution("00_setup_check", "setup-mean", {})
    assert callable(ns["mean_across_ranks"]) and ns["mean_across_ranks"].__module__ == "solution_setup_mean"
    with pytest.raises(KeyError, match="no exercise 'nope'"):
        solutions.solution("00_setup_check", "nope", {})
