"""One mutation: an exact snippet of a lab's code and the wrong code a plausible mistake puts there."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Mutation", "notebook"]


@dataclass(frozen=True)
class Mutation:
    name: str
    file: str  # relative to the repository root
    snippet: str  # must occur exactly once (in a notebook: in one code cell's source)
    wrong: str
    means: str  # the wrong code it stands for, in one line
    targets: tuple[str, ...]  # pytest arguments: the cheapest that must catch it
    claims: tuple[str, ...] = ()  # the ledger claims its ✓ stands for, "03/one-allreduce"


def notebook(lab: str) -> str:
    """The notebook of the lab folder ``lab`` ("03_ddp_no_sync"), relative to the repository root."""
    return f"labs/{lab}/{lab}.ipynb"
