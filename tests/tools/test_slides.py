"""Every figure a deck shows is a lab's own: a lab cell tagged figure:<name> whose stored output is
one plotly figure. (The decks themselves are built and opened in a browser by `make browser-test`.)"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

SLIDES = Path(__file__).resolve().parents[2] / "slides"
sys.path.insert(0, str(SLIDES))
import build  # noqa: E402  (slides/build.py)
import lab_figures  # noqa: E402

DECKS = {d.name: d for d in build.discover()}


@pytest.mark.parametrize("name", sorted(DECKS))
def test_every_deck_figure_is_a_lab_cell(name):
    deck = DECKS[name]
    written = sum(s.count("{{ figure") + s.count("{{figure") for s in deck.slides)
    assert written == len(deck.figure_names), f"{name}: a figure line does not parse ({deck.figure_names})"
    for ref in deck.figure_names:
        lab, _, fig_name = ref.rpartition("/")
        index, spec = lab_figures.find(lab or deck.lab, fig_name)
        assert spec.get("data"), f"{name}: figure {ref} (lab cell {index}) has no traces"


def test_a_figure_no_lab_cell_holds_is_refused():
    lab = next(d.lab for d in DECKS.values() if d.lab)
    with pytest.raises(KeyError, match="no cell is tagged 'figure:no_such_figure'"):
        lab_figures.figure("no_such_figure", default_lab=lab)
    with pytest.raises(KeyError, match="this deck has no lab"):
        lab_figures.figure("no_such_figure")
    with pytest.raises(KeyError, match="expected one labs/99_"):
        lab_figures.figure("99/x")


def test_every_lab_can_be_presented_live():
    """Slide metadata on every cell of every lab, a new slide at least at each section (run
    `python slides/mark_slides.py labs/NN_lab/NN_lab.ipynb` to add it without touching outputs)."""
    import nbformat

    for path in sorted((SLIDES.parent / "labs").glob("[0-9][0-9]_*/[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        kinds = [c.metadata.get("slideshow", {}).get("slide_type") for c in nb.cells]
        assert None not in kinds, (
            f"{path.name}: cells without slide metadata: {[i for i, k in enumerate(kinds) if k is None]}"
        )
        assert kinds[0] == "slide" and kinds.count("slide") >= 3, f"{path.name}: {kinds.count('slide')} slides"
