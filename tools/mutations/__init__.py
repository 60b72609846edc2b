"""Mutation check: each taught claim's test must fail when the code behind it is plausibly wrong.

    python -m tools.mutations                 # every mutation
    python -m tools.mutations --only "ring cost"
    python -m tools.mutations --lab 03        # lab 3's: its claims, its notebook, package or tests
    python -m tools.mutations --list          # name, file, the wrong code it stands for, targets

Each mutation is one exact snippet of a library instrument or of a lab's taught cell and the
wrong code a plausible mistake would put there; it names the ledger claims whose ✓ it must break
(``claims``). They live one file per lab (``lab03.py``) and one for the core instruments
(``core.py``). For each, the tracked files of the working tree are copied to a temporary
directory, the snippet is replaced there (never in the checkout), and the mutation's pytest
targets run against the copy (``PYTHONPATH`` set to it, ``LAB_SIZE=smoke``, notebooks under nbval
as ``make test`` runs them). Caught: pytest failed. SURVIVED: it passed, so a ✓ stands that wrong
code does not break. Each distinct target set first runs on the unmutated copy and must pass. A
snippet that does not occur exactly once is stale: the tool says which and exits non-zero, as it
does when any mutation survives. In a notebook the snippet is replaced in the source of the one
code cell holding it.
One line per mutation: its name, the verdict, the mutated run's seconds, the first failing test.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tools.mutations import core, lab00, lab01, lab02, lab03, lab04, lab05, lab06, lab07, lab08
from tools.mutations.mutation import Mutation

__all__ = ["Mutation", "MUTATIONS", "StaleMutation", "probe", "copy_tree", "apply", "run_targets", "of_lab", "main"]

ROOT = Path(__file__).resolve().parents[2]
NBVAL = ["--nbval", "--nbval-current-env", "--nbval-sanitize-with", "tests/notebooks/nbval_sanitize.cfg"]


class StaleMutation(ValueError):
    """A mutation's snippet no longer occurs exactly once in its file."""


MUTATIONS: tuple[Mutation, ...] = (
    *core.MUTATIONS,
    *lab00.MUTATIONS, *lab01.MUTATIONS, *lab02.MUTATIONS, *lab03.MUTATIONS, *lab04.MUTATIONS,
    *lab05.MUTATIONS, *lab06.MUTATIONS, *lab07.MUTATIONS, *lab08.MUTATIONS,
)  # fmt: skip


def _replace_once(text: str, m: Mutation, where: str) -> str:
    n = text.count(m.snippet)
    if n != 1:
        raise StaleMutation(f"mutation {m.name!r} is stale: its snippet occurs {n} times in {where}, not once")
    return text.replace(m.snippet, m.wrong)


def apply(m: Mutation, tree: Path) -> None:
    """Put ``m``'s wrong code into the copy at ``tree`` (raises StaleMutation)."""
    path = tree / m.file
    text = path.read_text(encoding="utf-8")
    if path.suffix != ".ipynb":
        path.write_text(_replace_once(text, m, m.file), encoding="utf-8")
        return
    nb = json.loads(text)
    cells = [c for c in nb["cells"] if c["cell_type"] == "code" and m.snippet in "".join(c["source"])]
    if len(cells) != 1:
        raise StaleMutation(f"mutation {m.name!r} is stale: its snippet is in {len(cells)} code cells of {m.file}")
    source = _replace_once("".join(cells[0]["source"]), m, f"a code cell of {m.file}")
    cells[0]["source"] = source.splitlines(keepends=True)
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def probe(m: Mutation, scratch: Path, root: Path = ROOT) -> None:
    """Apply ``m`` to a scratch copy of its one file: raises StaleMutation, touches nothing else."""
    if not (root / m.file).is_file():
        raise StaleMutation(f"mutation {m.name!r} is stale: {m.file} does not exist")
    (scratch / m.file).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(root / m.file, scratch / m.file)
    apply(m, scratch)


def copy_tree(dest: Path, root: Path = ROOT) -> Path:
    """Copy the working tree's tracked files (as they are now, edits included) into ``dest``."""
    names = subprocess.run(["git", "ls-files", "-z"], cwd=root, check=True, capture_output=True).stdout
    for name in names.decode().split("\0"):
        src = root / name
        if name and src.is_file():  # a tracked file deleted in the work tree is not copied
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def _env(tree: Path) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(tree), LAB_SIZE="smoke", OMP_NUM_THREADS="1")


def run_targets(targets: tuple[str, ...], tree: Path, timeout: float) -> tuple[int, str]:
    """Run pytest on ``targets`` in ``tree``: (return code, first failing test id or '')."""
    nbval = NBVAL if any(t.endswith(".ipynb") for t in targets) else []
    cmd = [sys.executable, "-m", "pytest", *targets, *nbval, "-p", "no:cacheprovider", "-x", "-q", "-rfE"]
    try:
        out = subprocess.run(cmd, cwd=tree, env=_env(tree), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return -1, f"(timed out after {timeout:g} s)"
    first = re.search(r"^(?:FAILED|ERROR) (.+?)(?: - .*)?$", out.stdout, re.M)
    return out.returncode, first.group(1) if first else ""


def _check_imports_copy(tree: Path) -> None:
    cmd = [sys.executable, "-c", "import lab_utils; print(lab_utils.__file__)"]
    got = subprocess.run(cmd, cwd=tree, env=_env(tree), capture_output=True, text=True, check=True).stdout
    if not Path(got.strip()).resolve().is_relative_to(tree.resolve()):
        raise RuntimeError(f"lab_utils imports from {got.strip()}, not from the copy: mutations would not count")


def _verdict(rc: int) -> str:
    return {0: "SURVIVED", 1: "caught"}.get(rc, "timed out" if rc == -1 else f"pytest error (rc {rc})")


def run_all(chosen: list[Mutation], timeout: float) -> int:
    failures = 0
    with tempfile.TemporaryDirectory(prefix="mutations_") as tmp:
        for m in chosen:  # every snippet checked before anything slow runs
            probe(m, Path(tmp) / "probe")
        base = copy_tree(Path(tmp) / "base")
        _check_imports_copy(base)
        baseline: dict[tuple[str, ...], tuple[int, str]] = {}
        for m in chosen:
            if m.targets not in baseline:
                baseline[m.targets] = run_targets(m.targets, base, timeout)
            t0 = time.monotonic()
            if baseline[m.targets][0] != 0:
                verdict, first = "baseline fails", baseline[m.targets][1]
            else:
                tree = copy_tree(Path(tmp) / "mutant")
                apply(m, tree)
                rc, first = run_targets(m.targets, tree, timeout)
                verdict = _verdict(rc)
                shutil.rmtree(tree)
            failures += verdict != "caught"
            print(f"{m.name:<20} {verdict:<14} {time.monotonic() - t0:6.0f} s  {first}", flush=True)
    return failures


def of_lab(m: Mutation, lab: str) -> bool:
    """True when ``m`` belongs to lab ``lab`` ("03"): it names one of the lab's claims ("03/..."),
    or it mutates or is caught in the lab's notebook folder, its package ``lab_utils/labs/lab03_*``
    or its tests ``tests/labs/lab03_*``."""
    nn = f"{int(lab):02d}"
    places = (f"labs/{nn}_", f"lab_utils/labs/lab{nn}_", f"tests/labs/lab{nn}_")
    return any(c.startswith(f"{nn}/") for c in m.claims) or any(p.startswith(places) for p in (m.file, *m.targets))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.mutations", description=__doc__.split("\n")[0])
    parser.add_argument("--only", metavar="NAME", help="run one mutation (its name as --list shows it)")
    parser.add_argument("--lab", metavar="NN", help="only lab NN's mutations (its claims, notebook, package or tests)")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--timeout", type=float, default=1200, help="seconds allowed to one pytest run")
    args = parser.parse_args(argv)
    chosen = [m for m in MUTATIONS if args.only in (None, m.name) and (args.lab is None or of_lab(m, args.lab))]
    if not chosen and args.lab is not None:
        parser.error(f"no mutation touches lab {args.lab!r} (its notebook, its package or its tests)")
    if not chosen:
        parser.error(f"no mutation named {args.only!r}; the names: {', '.join(m.name for m in MUTATIONS)}")
    if args.list:
        for m in chosen:
            print(f"{m.name:<20} {m.file}\n{'':<20} {m.means}\n{'':<20} pytest {' '.join(m.targets)}")
        return 0
    t0 = time.monotonic()
    try:
        failures = run_all(chosen, args.timeout)
    except StaleMutation as err:
        print(err, file=sys.stderr)
        return 2
    print(f"{len(chosen) - failures} of {len(chosen)} caught in {time.monotonic() - t0:.0f} s")
    return 1 if failures else 0
