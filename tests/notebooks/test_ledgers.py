"""Every lab keeps the fourth edition's rules, read from the notebooks as stored: a ledger of at most
eight claims, each ✓ naming one, each checked claim with a mutation that must break it, and a core
path within a lecture's budget (``tools/ledger.py``, ``tools/budgets.py``)."""

from __future__ import annotations

import json
import re

import pytest

from tools import budgets, ledger
from tools.mutations import MUTATIONS

NOTEBOOKS = ledger.notebooks()
TAG = re.compile(r"^✓ .*  \[([a-z0-9][a-z0-9-]*)\]$")


def _nb(path):
    return json.loads(path.read_text(encoding="utf-8"))


def _ids(path):
    return pytest.param(path, id=path.parent.name)


@pytest.mark.parametrize("path", [_ids(p) for p in NOTEBOOKS])
def test_the_ledger_rules_hold(path):
    assert ledger.problems(_nb(path)) == []


@pytest.mark.parametrize("path", [_ids(p) for p in NOTEBOOKS])
def test_every_checked_claim_has_a_mutation(path):
    lab = path.parent.name[:2]
    broken = {c for m in MUTATIONS for c in m.claims}
    checked = {k.claim for k in ledger.check_calls(_nb(path)) if k.claim}
    missing = sorted(c for c in checked if f"{lab}/{c}" not in broken)
    assert not missing, f"claims checked with no mutation in tools/mutations/lab{lab}.py: {missing}"


def test_every_mutation_names_claims_that_exist():
    known = {
        f"{p.parent.name[:2]}/{c.id}"
        for p in NOTEBOOKS
        for led in [ledger.read(_nb(p))]
        for c in led.core + led.further
    }
    for m in MUTATIONS:
        assert set(m.claims) <= known, f"mutation {m.name!r} names claims no ledger lists: {set(m.claims) - known}"


@pytest.mark.parametrize("path", [_ids(p) for p in NOTEBOOKS])
def test_every_stored_tick_names_a_ledger_claim(path):
    nb = _nb(path)
    led = ledger.read(nb)
    known = {c.id for c in led.core + led.further}
    for i, cell in enumerate(nb["cells"]):
        for out in cell.get("outputs", []):
            text = out.get("text", "")
            for line in ("".join(text) if isinstance(text, list) else text).splitlines():
                if line.startswith("✓"):
                    m = TAG.match(line)
                    assert m and m.group(1) in known, f"cell {i} prints a ✓ that is no ledger claim's check: {line!r}"


@pytest.mark.parametrize("path", [_ids(p) for p in NOTEBOOKS])
def test_the_core_path_keeps_a_lecture_s_budget(path):
    assert budgets.over(budgets.measure(path)) == []
