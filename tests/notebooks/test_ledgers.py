"""Every lab keeps the fourth edition's rules, read from the notebooks as stored: a ledger of at most
eight claims, each ✓ naming one, each checked claim with a mutation that must break it, a core
path within a lecture's budget (``tools/ledger.py``, ``tools/budgets.py``), and a deck that follows
the ledger: each core claim tagged ``Claim `<id>` `` in the notes of exactly one slide."""

from __future__ import annotations

import json
import re

import pytest

from tools import budgets, ledger
from tools.mutations import MUTATIONS

NOTEBOOKS = ledger.notebooks()
TAG = re.compile(r"^✓ .*  \[([a-z0-9][a-z0-9-]*)\]$")
DECK_TAG = re.compile(r"Claim `([a-z0-9][a-z0-9-]*)`")
# A deck splits as slides/build.py's parse() splits it (not imported: it loads plotly and edits
# sys.path): front matter between the first two lines holding only ---, then a slide between each
# two such lines; the speaker notes of a slide follow its line "Note:".
SEPARATOR = re.compile(r"^---[ \t]*$", re.M)
NOTE = re.compile(r"^Note:[ \t]*", re.M)


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


def _slides(deck) -> list[tuple[str, str]]:
    """Each slide of a deck source as (body, speaker notes)."""
    text = deck.read_text(encoding="utf-8")
    if text.startswith("---"):
        text = SEPARATOR.split(text, maxsplit=2)[2]
    slides = [s.strip("\n") for s in SEPARATOR.split(text) if s.strip()]
    return [tuple(NOTE.split(s, maxsplit=1)) if NOTE.search(s) else (s, "") for s in slides]


def deck_problems(deck, led: ledger.Ledger) -> list[str]:
    """How a deck breaks "one slide per claim": a core claim not tagged on exactly one slide, a
    Going-further claim on more than one, a tag that names no claim of the ledger, a tag outside
    the notes, a Going-further tag without "(Going further)" or a core tag with it."""
    core, further = {c.id for c in led.core}, {c.id for c in led.further}
    out, on = [], {}
    for n, (body, notes) in enumerate(_slides(deck), start=1):
        title = next((line.lstrip("# ") for line in body.splitlines() if line.startswith("#")), "")
        where = f"slide {n} ({title!r})"
        out += [f"{where}: tag `{t}` outside the notes" for t in DECK_TAG.findall(body)]
        for m in DECK_TAG.finditer(notes):
            cid, gf = m.group(1), notes[m.end() :].startswith(" (Going further")
            if cid not in core | further:
                out.append(f"{where}: tags `{cid}`, which no claim of the ledger has")
            elif gf != (cid in further):
                out.append(
                    f"{where}: `{cid}` is a {'Going-further' if cid in further else 'core'} claim: "
                    f"tag it Claim `{cid}`{' (Going further)' if cid in further else ''}"
                )
            on.setdefault(cid, []).append(n)
    for cid, slides in on.items():
        on[cid] = sorted(set(slides))
    for cid in sorted(core):
        if len(on.get(cid, [])) != 1:
            out.append(f"core claim `{cid}` is tagged on slides {on.get(cid, [])}, not on exactly one")
    for cid in sorted(further):
        if len(on.get(cid, [])) > 1:
            out.append(f"Going-further claim `{cid}` is tagged on slides {on[cid]}, more than one")
    return out


@pytest.mark.parametrize("path", [_ids(p) for p in NOTEBOOKS])
def test_each_deck_tags_every_claim_once(path):
    """Decks follow the ledger: each core claim tagged in the notes of exactly one slide (the slide
    that presents it, with its figure), each Going-further claim on at most one, no tag for a
    claim the lab no longer makes."""
    deck = path.parent / "deck.md"
    assert deck.exists(), f"{path.parent.name} has no deck.md"
    assert deck_problems(deck, ledger.read(_nb(path))) == []
