"""A lab's claim ledger: what its core path asserts, each claim proven once (fourth edition).

    python -m tools.ledger                   # every lab: its claims, where each is proven
    python -m tools.ledger labs/03_ddp_no_sync/03_ddp_no_sync.ipynb

The ledger is a numbered list in the notebook's opening markdown, under the words "What this lab
shows"; a "Going further" section may carry its own, under "What Going further shows". Each item
starts with its claim's id in backticks and says the claim in one sentence:

    1. `one-allreduce` Under `no_sync()` a K-micro-step update all-reduces once, not K times.
    2. `bucket-cap` DDP packs gradients into buckets of `bucket_cap_mb` (source: PyTorch,
       `torch/nn/parallel/distributed.py` v2.13, `DistributedDataParallel.__init__`).

A claim is either **measured**, proven by exactly one ``check(..., claim="<id>")`` call in the
notebook, or **cited**: its item names a source ("source:") and no ``check`` proves it.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Claim", "CheckCall", "Ledger", "read", "check_calls", "problems", "further_start", "notebooks", "main"]

LABS = Path(__file__).resolve().parent.parent / "labs"
CORE_TITLE = "What this lab shows"
FURTHER_TITLE = "What Going further shows"
FURTHER = re.compile(r"^#{1,3}\s+Going further", re.M)
ITEM = re.compile(r"^\d+\.\s+`([a-z0-9][a-z0-9-]*)`\s+(.*)$")
MAX_CORE_CLAIMS = 8


@dataclass(frozen=True)
class Claim:
    id: str
    text: str  # the item's sentence, continuation lines joined
    cited: bool  # proven by a source ("source:") rather than by a check


@dataclass(frozen=True)
class CheckCall:
    cell: int  # the code cell's index in the notebook
    claim: str | None  # the literal claim= of the call; None when it has none (or not a literal)
    further: bool  # in "Going further"


@dataclass
class Ledger:
    core: list[Claim] = field(default_factory=list)
    further: list[Claim] = field(default_factory=list)


def _source(cell: dict) -> str:
    src = cell["source"]
    return "".join(src) if isinstance(src, list) else src


def _items(text: str, title: str) -> list[Claim]:
    """The numbered items right after ``title`` (up to the first line that is neither an item, its
    indented continuation, nor blank between items)."""
    at = text.find(title)
    if at < 0:
        return []
    claims: list[tuple[str, list[str]]] = []
    for line in text[at + len(title) :].splitlines()[1:]:
        m = ITEM.match(line)
        if m:
            claims.append((m.group(1), [m.group(2)]))
        elif claims and line.startswith((" ", "\t")) and line.strip():
            claims[-1][1].append(line.strip())
        elif claims and line.strip():  # the first line after the list ends it
            break
    return [Claim(i, " ".join(t), "source:" in " ".join(t).lower()) for i, t in claims]


def further_start(cells: list[dict]) -> int:
    """The index of the first markdown cell with a "Going further" heading (len(cells) if none)."""
    for i, c in enumerate(cells):
        if c["cell_type"] == "markdown" and FURTHER.search(_source(c)):
            return i
    return len(cells)


def read(nb: dict) -> Ledger:
    """The notebook's ledgers: the core's (in the markdown before its first code cell) and
    Going further's (in its markdown)."""
    cells = nb["cells"]
    start = further_start(cells)
    ledger = Ledger()
    for i, c in enumerate(cells):
        if c["cell_type"] != "markdown":
            continue
        if i < start and CORE_TITLE in _source(c):
            ledger.core += _items(_source(c), CORE_TITLE)
        if i >= start and FURTHER_TITLE in _source(c):
            ledger.further += _items(_source(c), FURTHER_TITLE)
    return ledger


def _parseable(source: str) -> str:
    """A cell's source with IPython's magics and shell lines blanked, so ``ast`` can read it."""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())


def check_calls(nb: dict) -> list[CheckCall]:
    """Every ``check(...)`` call in the notebook's code cells, with its literal ``claim=``."""
    cells = nb["cells"]
    start = further_start(cells)
    calls = []
    for i, c in enumerate(cells):
        if c["cell_type"] != "code":
            continue
        for node in ast.walk(ast.parse(_parseable(_source(c)))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "check":
                kw = next((k.value for k in node.keywords if k.arg == "claim"), None)
                claim = kw.value if isinstance(kw, ast.Constant) and isinstance(kw.value, str) else None
                calls.append(CheckCall(i, claim, i >= start))
    return calls


def problems(nb: dict) -> list[str]:
    """What breaks the ledger rules in ``nb``; empty when it keeps them."""
    ledger, calls = read(nb), check_calls(nb)
    out = []
    if not ledger.core:
        out.append(f"no ledger: the opening markdown has no numbered claims under {CORE_TITLE!r}")
    if len(ledger.core) > MAX_CORE_CLAIMS:
        out.append(f"{len(ledger.core)} core claims; the ledger holds at most {MAX_CORE_CLAIMS}")
    ids = [c.id for c in ledger.core + ledger.further]
    out += [f"claim {i!r} is listed twice" for i in sorted({i for i in ids if ids.count(i) > 1})]
    for part, claims in (("core", ledger.core), ("Going further", ledger.further)):
        known = {c.id: c for c in claims}
        mine = [k for k in calls if k.further == (part != "core")]
        for k in mine:
            if k.claim is None:
                out.append(f"cell {k.cell}: check() without a literal claim= (every ✓ names a ledger claim)")
            elif k.claim not in known:
                out.append(f"cell {k.cell}: check(claim={k.claim!r}) names no claim of the {part} ledger")
        for c in claims:
            n = sum(k.claim == c.id for k in mine)
            if c.cited and n:
                out.append(f"claim {c.id!r} cites a source and is checked too: one proof each")
            if not c.cited and n != 1:
                out.append(f"claim {c.id!r} is proven by {n} check() calls, not exactly one (or cite a source)")
    return out


def notebooks() -> list[Path]:
    return sorted(p for p in LABS.glob("[0-9][0-9]_*/[0-9][0-9]_*.ipynb") if p.stem == p.parent.name)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.ledger", description=__doc__.split("\n\n")[0])
    ap.add_argument("notebooks", nargs="*", type=Path)
    args = ap.parse_args(argv)
    bad = 0
    for p in args.notebooks or notebooks():
        nb = json.loads(p.read_text(encoding="utf-8"))
        ledger, calls = read(nb), check_calls(nb)
        print(f"{p.stem}: {len(ledger.core)} claims, {len(ledger.further)} in Going further")
        for c in ledger.core + ledger.further:
            where = "cited" if c.cited else ", ".join(f"cell {k.cell}" for k in calls if k.claim == c.id) or "unproven"
            print(f"  {c.id:<24} {where}")
        for msg in problems(nb):
            print(f"  ✗ {msg}")
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
