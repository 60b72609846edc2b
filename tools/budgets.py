"""Each lab's core path measured against a lecture's budget: what a student reads and runs before
"Going further" (the fourth edition's targets: about 2,000 words of prose, 300 lines of code, no
printout longer than about 20 lines or wider than about 7 columns, each table and figure explained
in the markdown cell right above it).

    python -m tools.budgets                  # one row per lab
    python -m tools.budgets labs/03_ddp_no_sync/03_ddp_no_sync.ipynb

Counted from the notebook as stored: prose words (markdown cells, split on white space), code lines
(non-blank lines of code cells, exercise stubs included), the longest and the widest printout of
one cell (its stored stdout), the most columns of a printed table (a printout of three or more
lines whose fields are set apart by two or more spaces), the tables and figures with no markdown
cell right above them, and the claims it checks (``check(`` calls and the ✓ lines stored).
``over(budget)`` lists what exceeds the limits; the tests hold every lab to them.
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import dataclass
from pathlib import Path

from tools import ledger
from tools.ledger import FURTHER

__all__ = ["Budget", "LIMITS", "core_cells", "measure", "over", "main"]

CHECK_CALL = re.compile(r"(?<![\w.])check\(")
FIELDS = re.compile(r"\s{2,}")
FIGURES = ("image/png", "image/svg+xml", "application/vnd.plotly.v1+json", "application/vnd.jupyter.widget-view+json")
LIMITS = {"words": 2000, "code_lines": 320, "longest_printout": 20, "table_columns": 8}  # 8: a label + 7


@dataclass(frozen=True)
class Budget:
    lab: str
    words: int
    code_lines: int
    longest_printout: int  # lines of one cell's stdout
    widest_printout: int  # characters of its widest line
    check_calls: int
    ticks: int  # ✓ lines stored in the core's outputs
    table_columns: int = 0  # the most fields of one line of a printed table
    unexplained: tuple[int, ...] = ()  # cells with a table or figure and no markdown cell above


def core_cells(nb: dict) -> list[dict]:
    """The cells before the first "Going further" heading (all of them when there is none); the
    heading's own cell counts up to the heading (a summary written above it is read in the core)."""
    cells = nb["cells"]
    i = ledger.further_start(cells)
    if i == len(cells):
        return cells
    head = "".join(cells[i]["source"])[: FURTHER.search("".join(cells[i]["source"])).start()]
    return cells[:i] + ([dict(cells[i], source=head)] if head.strip() else [])


def _stdout(cell: dict) -> str:
    return "".join(
        "".join(o["text"]) if isinstance(o.get("text"), list) else o.get("text", "")
        for o in cell.get("outputs", [])
        if o.get("output_type") == "stream" and o.get("name") == "stdout"
    )


def _table_columns(lines: list[str]) -> int:
    """Fields of the widest table row, 0 when the printout is no table (fewer than 3 rows of 3+)."""
    rows = [len(FIELDS.split(line.strip())) for line in lines if line.strip()]
    rows = [n for n in rows if n >= 3]
    return max(rows) if len(rows) >= 3 else 0


def _shows_figure(cell: dict) -> bool:
    return any(k in o.get("data", {}) for o in cell.get("outputs", []) for k in FIGURES)


def measure(path: Path) -> Budget:
    core = core_cells(json.loads(Path(path).read_text(encoding="utf-8")))
    prose = [("".join(c["source"])) for c in core if c["cell_type"] == "markdown"]
    code = [("".join(c["source"])) for c in core if c["cell_type"] == "code"]
    outs = [_stdout(c).rstrip("\n").splitlines() for c in core if c["cell_type"] == "code"]
    return Budget(
        lab=Path(path).stem,
        words=sum(len(p.split()) for p in prose),
        code_lines=sum(1 for c in code for line in c.splitlines() if line.strip()),
        longest_printout=max((len(o) for o in outs), default=0),
        widest_printout=max((len(line) for o in outs for line in o), default=0),
        check_calls=sum(len(CHECK_CALL.findall(c)) for c in code),
        ticks=sum(1 for o in outs for line in o if line.startswith("✓")),
        table_columns=max((_table_columns(o) for o in outs), default=0),
        unexplained=tuple(
            i
            for i, c in enumerate(core)
            if c["cell_type"] == "code"
            and (_table_columns(_stdout(c).splitlines()) or _shows_figure(c))
            and (i == 0 or core[i - 1]["cell_type"] != "markdown")
        ),
    )


def over(b: Budget) -> list[str]:
    """What of ``b`` exceeds the limits, one sentence each; empty when it keeps them."""
    out = [f"{k.replace('_', ' ')}: {getattr(b, k)} > {v}" for k, v in LIMITS.items() if getattr(b, k) > v]
    if b.unexplained:
        out.append(f"cells {list(b.unexplained)} show a table or figure with no markdown cell right above")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.budgets", description=__doc__.split("\n\n")[0])
    ap.add_argument("notebooks", nargs="*", type=Path)
    args = ap.parse_args(argv)
    paths = args.notebooks or ledger.notebooks()
    head = ("lab", "words", "code lines", "longest out", "columns", "check()", "✓ stored")
    print(f"{head[0]:<28}" + "".join(f"{h:>12}" for h in head[1:]))
    for p in paths:
        b = measure(p)
        row = (b.words, b.code_lines, b.longest_printout, b.table_columns, b.check_calls, b.ticks)
        print(f"{b.lab:<28}" + "".join(f"{v:>12}" for v in row))
        for msg in over(b):
            print(f"{'':<28}over: {msg}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
