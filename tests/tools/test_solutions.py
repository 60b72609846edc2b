"""tools.solutions on a lab of its own making: stubs by nbgrader's rule, every malformed
solutions file refused with the place to fix, and the CLI's check / sync / build round trip."""

from __future__ import annotations

import textwrap
from pathlib import Path

import nbformat
import pytest

from tools import solutions

SOLVED = textwrap.dedent(
    '''\
    # %% [markdown]
    # Solutions to a tiny lab.

    # %% exercise="double"
    def double(x):
        """Return 2 x."""
        ### BEGIN SOLUTION
        y = x + x
        return y
        ### END SOLUTION


    # %% exercise="predict"
    ### BEGIN SOLUTION
    answer = 4
    units: str = "bytes"
    ### END SOLUTION
    '''
)


@pytest.fixture
def lab(tmp_path) -> Path:
    """A lab with two exercise cells (stale text in them) and its solutions file."""
    folder = tmp_path / "09_tiny"  # a lab's folder: its notebook and its solutions side by side
    folder.mkdir()
    (folder / "solutions.py").write_text(SOLVED)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# A tiny lab")]
    for ex in ("double", "predict"):
        cell = nbformat.v4.new_code_cell("stale", metadata={"exercise": ex, "tags": ["exercise"]})
        cell.outputs = [nbformat.v4.new_output("stream", text="old output")]
        nb.cells += [cell, nbformat.v4.new_code_cell(f"check_{ex}()", metadata={"tags": ["exercise-check"]})]
    path = folder / "09_tiny.ipynb"
    nbformat.write(nb, path)
    return path


def test_stub_replaces_a_function_body_and_a_top_level_region():
    sols = solutions.read_solutions_text(SOLVED, "09_tiny.py")
    assert list(sols) == ["double", "predict"]
    double = sols["double"].student
    assert "# YOUR CODE HERE\n    raise NotImplementedError()" in double and "x + x" not in double
    assert '"""Return 2 x."""' in double and solutions.BEGIN not in double
    assert sols["predict"].student == "answer = ...  # YOUR ANSWER HERE\nunits = ...  # YOUR ANSWER HERE"


@pytest.mark.parametrize(
    "source, says",
    [
        ("x = 1", "has no ### BEGIN SOLUTION"),
        ("### BEGIN SOLUTION\nx = 1", "never closed"),
        ("x = 1\n### END SOLUTION", "line 2: ### END SOLUTION without"),
        ("### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION", "line 2: ### BEGIN SOLUTION inside another"),
        ("### BEGIN SOLUTION\nprint(4)\n### END SOLUTION", "may only assign names"),
        ("### BEGIN SOLUTION\nx = (\n### END SOLUTION", "does not parse"),
    ],
)
def test_stub_refuses_malformed_regions_and_names_the_exercise(source, says):
    with pytest.raises(ValueError, match=f"exercise 'ex7'.*{says}"):
        solutions.stub(source, where="ex7")


def test_a_duplicate_exercise_id_is_refused():
    with pytest.raises(ValueError, match="exercise 'double' appears twice"):
        solutions.read_solutions_text(SOLVED + '\n# %% exercise="double"\nx = 1\n', "dup.py")


def test_check_sync_build_round_trip(lab, tmp_path, capsys):
    assert solutions.drift(lab) == ["double", "predict"]
    assert solutions.main(["check", str(lab)]) == 1
    assert "out of step" in capsys.readouterr().out
    assert solutions.main(["sync", str(lab)]) == 0
    assert solutions.drift(lab) == [] and solutions.main(["check", str(lab)]) == 0
    nb = nbformat.read(lab, as_version=4)
    assert nb.cells[1].source.endswith("raise NotImplementedError()") and nb.cells[1].outputs == []
    assert solutions.sync(lab) == []  # a second sync changes nothing

    out = tmp_path / "instructor"
    assert solutions.main(["build", str(lab), "--out", str(out)]) == 0
    solved = nbformat.read(out / lab.name, as_version=4)
    assert "y = x + x" in solved.cells[1].source and "answer = 4" in solved.cells[3].source
    kept = solutions.grading_cells(solved)
    assert [c.source.split("\n")[0] for c in kept.cells] == [
        "def double(x):",
        "check_double()",
        solutions.BEGIN,
        "check_predict()",
    ]


def test_a_lab_and_its_solutions_must_name_the_same_exercises(lab):
    nb = nbformat.read(lab, as_version=4)
    nb.cells[3].metadata["exercise"] = "renamed"
    nbformat.write(nb, lab)
    with pytest.raises(ValueError, match=r"exercise cells \['double', 'renamed'\] but solutions.py solves"):
        solutions.drift(lab)
    nb.cells[3].metadata["tags"] = []
    nbformat.write(nb, lab)
    with pytest.raises(ValueError, match="cell 3 has exercise metadata 'renamed' but not the tag"):
        solutions.drift(lab)


def test_solution_runs_one_exercise_and_names_the_missing_one(lab):
    ns = solutions.solution("09_tiny", "double", {}, labs=lab.parent.parent)
    assert ns["double"](3) == 6 and ns["double"].__module__ == "solution_double"
    with pytest.raises(KeyError, match=r"09_tiny: no exercise 'nope'; its exercises are \['double', 'predict'\]"):
        solutions.solution("09_tiny", "nope", {}, labs=lab.parent.parent)
