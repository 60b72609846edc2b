"""Give a lab's cells slide metadata for presenting it live (RISE, or nbconvert --to slides):
a markdown cell opening with a '#'/'##' heading starts a slide, every other cell continues it.

    python slides/mark_slides.py labs/00_setup_check/00_setup_check.ipynb [more]   # rewrites metadata only
    python slides/mark_slides.py --check labs/*/[0-9]*.ipynb                        # exit 1 if any lacks it

Only ``metadata.slideshow`` changes: sources, outputs and execution counts stay as they are, so
the notebooks' stored outputs (and nbval) are untouched. A slide_type set by hand is kept.
"""

from __future__ import annotations

import argparse
import re
import sys

import nbformat

HEADING = re.compile(r"^\s*#{1,2}\s")


def wanted(cell) -> str:
    return "slide" if cell.cell_type == "markdown" and HEADING.match(cell.source) else "-"


def mark(nb) -> int:
    changed = 0
    for i, cell in enumerate(nb.cells):
        show = cell.metadata.get("slideshow", {})
        if "slide_type" in show:
            continue
        cell.metadata["slideshow"] = {**show, "slide_type": "slide" if i == 0 else wanted(cell)}
        changed += 1
    return changed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebooks", nargs="+")
    ap.add_argument("--check", action="store_true", help="report notebooks lacking metadata, change nothing")
    args = ap.parse_args(argv)
    missing = 0
    for path in args.notebooks:
        nb = nbformat.read(path, as_version=4)
        n = mark(nb)
        slides = sum(c.metadata["slideshow"]["slide_type"] == "slide" for c in nb.cells)
        if args.check:
            missing += bool(n)
            print(f"{path}: {'missing on ' + str(n) + ' cells' if n else 'ok'} ({slides} slides)")
        elif n:
            nbformat.write(nb, path)
            print(f"{path}: slide metadata on {n} cells ({slides} slides)")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
