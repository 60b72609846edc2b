"""Each lab's core path measured against a lecture's budget: what a student reads and runs before
"Going further" (the fourth edition's targets: about 2,000 words of prose, 300 lines of code, no
printout longer than about 20 lines).

    python -m tools.budgets                  # one row per lab
    python -m tools.budgets labs/03_ddp_no_sync/03_ddp_no_sync.ipynb

Counted from the notebook as stored: prose words (markdown cells, split on white space), code lines
(non-blank lines of code cells, exercise stubs included), the longest and the widest printout of
one cell (its stored stdout), and the claims it checks (``check(`` calls and the ✓ lines stored).
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Budget", "core_cells", "measure", "main"]

LABS = Path(__file__).resolve().parent.parent / "labs"
FURTHER = re.compile(r"^#{1,3}\s+Going further", re.M)
CHECK_CALL = re.compile(r"(?<![\w.])check\(")


@dataclass(frozen=True)
class Budget:
    lab: str
    words: int
    code_lines: int
    longest_printout: int  # lines of one cell's stdout
    widest_printout: int  # characters of its widest line
    check_calls: int
    ticks: int  # ✓ lines stored in the core's outputs


def core_cells(nb: dict) -> list[dict]:
    """The cells before the first "Going further" heading (all of them when there is none)."""
    cells = nb["cells"]
    for i, c in enumerate(cells):
        if c["cell_type"] == "markdown" and FURTHER.search("".join(c["source"])):
            return cells[:i]
    return cells


def _stdout(cell: dict) -> str:
    return "".join(
        "".join(o["text"]) if isinstance(o.get("text"), list) else o.get("text", "")
        for o in cell.get("outputs", [])
        if o.get("output_type") == "stream" and o.get("name") == "stdout"
    )


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
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.budgets", description=__doc__.split("\n\n")[0])
    ap.add_argument("notebooks", nargs="*", type=Path)
    args = ap.parse_args(argv)
    paths = args.notebooks or sorted(p for p in LABS.glob("[0-9][0-9]_*/[0-9][0-9]_*.ipynb") if p.stem == p.parent.name)
    head = ("lab", "words", "code lines", "longest out", "widest out", "check()", "✓ stored")
    print(f"{head[0]:<28}" + "".join(f"{h:>12}" for h in head[1:]))
    for p in paths:
        b = measure(p)
        row = (b.words, b.code_lines, b.longest_printout, b.widest_printout, b.check_calls, b.ticks)
        print(f"{b.lab:<28}" + "".join(f"{v:>12}" for v in row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
