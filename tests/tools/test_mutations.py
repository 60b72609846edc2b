"""tools.mutations, its cheap parts: snippets found once, applied to a copy, stale ones named.
(The mutations' pytest targets are not run here: ``python -m tools.mutations`` does that.)"""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from tools import mutations
from tools.mutations import MUTATIONS, Mutation, StaleMutation, apply, copy_tree, probe

ROOT = Path(__file__).resolve().parents[2]


def test_every_snippet_occurs_once_and_names_are_unique(tmp_path):
    for m in MUTATIONS:
        probe(m, tmp_path)
        assert m.snippet != m.wrong and m.targets and m.means
    assert len({m.name for m in MUTATIONS}) == len(MUTATIONS)


def test_a_stale_snippet_is_reported_by_name(tmp_path):
    stale = replace(MUTATIONS[0], name="gone", snippet="no such code anywhere")
    with pytest.raises(StaleMutation, match=r"'gone' is stale: its snippet occurs 0 times in lab_utils/netmodel.py"):
        probe(stale, tmp_path)
    twice = Mutation("twice", "f.py", "x", "y", "-", ("t",))
    (tmp_path / "f.py").write_text("x = x\n")
    with pytest.raises(StaleMutation, match="'twice' is stale: its snippet occurs 2 times"):
        apply(twice, tmp_path)


def test_the_tool_exits_non_zero_on_a_stale_mutation(monkeypatch, capsys):
    monkeypatch.setattr(mutations, "MUTATIONS", (replace(MUTATIONS[0], snippet="no such code anywhere"),))
    assert mutations.main([]) == 2
    assert f"{MUTATIONS[0].name!r} is stale" in capsys.readouterr().err


def test_a_mutation_changes_the_copy_and_not_the_checkout(tmp_path):
    m = next(m for m in MUTATIONS if not m.file.endswith(".ipynb"))
    before = (ROOT / m.file).read_text(encoding="utf-8")
    tree = copy_tree(tmp_path)
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert (tree / "lab_utils" / "__init__.py").is_file() and not (tree / ".git").exists()
    assert all((tree / n).is_file() for n in tracked.split() if (ROOT / n).is_file())
    apply(m, tree)
    assert m.wrong in (tree / m.file).read_text(encoding="utf-8")
    assert (ROOT / m.file).read_text(encoding="utf-8") == before


def test_a_notebook_mutation_edits_one_code_cell_only(tmp_path):
    m = next(m for m in MUTATIONS if m.file.endswith(".ipynb"))
    probe(m, tmp_path)
    old = json.loads((ROOT / m.file).read_text(encoding="utf-8"))["cells"]
    new = json.loads((tmp_path / m.file).read_text(encoding="utf-8"))["cells"]
    changed = [i for i, (a, b) in enumerate(zip(old, new)) if a != b]
    assert len(old) == len(new) and len(changed) == 1
    assert m.wrong in "".join(new[changed[0]]["source"]) and new[changed[0]]["cell_type"] == "code"


def test_a_lab_s_mutations_are_those_of_its_notebook_package_or_tests():
    from tools.mutations import of_lab

    names = {m.name for m in MUTATIONS if of_lab(m, "7")}
    assert "saved-bytes identity" in names and "ZeRO grads" in names and "ring cost" not in names
    assert {m.name for m in MUTATIONS if of_lab(m, "02")} >= {"lab 2 / K", "summed loss"}
