"""A deck's figures are its lab's figures: read from the stored outputs of tagged lab cells.

    from lab_figures import find, figure
    find("01_gradient_checkpointing.ipynb", "tradeoff")   # -> (cell index, plotly dict)
    figure("tradeoff", default_lab="01_gradient_checkpointing.ipynb")
    figure("03/comm")                                      # the cell tagged figure:comm in labs/03_*/03_*.ipynb

A lab marks a cell with the tag ``figure:<name>``; its stored output (the notebook as executed at
the student size, `make execute`) holds exactly one plotly figure. A deck shows it with
``{{ figure: <name> }}`` (its own lab) or ``{{ figure: NN/<name> }}`` (lab NN, for the overview).
So a deck can show no figure its lab does not, and the deck build runs no experiment.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

LABS = Path(__file__).resolve().parent.parent / "labs"
PLOTLY_MIME = "application/vnd.plotly.v1+json"
TAG = "figure:"

__all__ = ["LABS", "TAG", "lab_path", "tagged", "find", "figure"]


def lab_path(ref: str) -> Path:
    """``01_gradient_checkpointing.ipynb`` or a lab number ``01`` -> the notebook's path."""
    if ref.endswith(".ipynb"):
        path = LABS / ref[: -len(".ipynb")] / ref
    else:
        found = sorted(LABS.glob(f"{ref}_*/{ref}_*.ipynb"))
        if len(found) != 1:
            raise KeyError(f"lab {ref!r}: expected one labs/{ref}_*/{ref}_*.ipynb, found {[p.name for p in found]}")
        path = found[0]
    if not path.exists():
        raise KeyError(f"lab {ref!r}: no notebook {path.name} in labs/{path.parent.name}/")
    return path


@functools.cache
def _cells(path: Path) -> tuple[dict, ...]:
    return tuple(json.loads(path.read_text(encoding="utf-8"))["cells"])


def tagged(lab: str) -> dict[str, int]:
    """Figure name -> cell index, for every cell of ``lab`` tagged ``figure:<name>``."""
    out: dict[str, int] = {}
    for i, cell in enumerate(_cells(lab_path(lab))):
        for tag in cell.get("metadata", {}).get("tags", []):
            if tag.startswith(TAG):
                name = tag[len(TAG) :]
                if name in out:
                    raise ValueError(f"{lab}: cells {out[name]} and {i} are both tagged {tag!r}")
                out[name] = i
    return out


def find(lab: str, name: str) -> tuple[int, dict]:
    """The index of the lab cell tagged ``figure:<name>`` and the plotly figure it stored."""
    cells = tagged(lab)
    if name not in cells:
        raise KeyError(f"{lab}: no cell is tagged 'figure:{name}'; tagged there: {sorted(cells)}")
    index = cells[name]
    figs = [
        o["data"][PLOTLY_MIME]
        for o in _cells(lab_path(lab))[index].get("outputs", [])
        if PLOTLY_MIME in o.get("data", {})
    ]
    if len(figs) != 1:
        raise ValueError(
            f"{lab} cell {index} (figure:{name}) stored {len(figs)} plotly figures, not one; "
            f"run `make execute NB={lab_path(lab).relative_to(LABS.parent)}` to store its outputs"
        )
    return index, figs[0]


def figure(ref: str, default_lab: str | None = None) -> dict:
    """The figure a deck names: ``name`` in ``default_lab``, or ``NN/name`` in lab NN."""
    lab, sep, name = ref.rpartition("/")
    if not sep:
        if not default_lab:
            raise KeyError(f"figure {ref!r}: this deck has no lab; name one as NN/{ref}")
        lab = default_lab
    return find(lab, name)[1]
