"""Mutation check: each taught claim's test must fail when the code behind it is plausibly wrong.

    python -m tools.mutations                 # every mutation (about 12 minutes on 2 cores)
    python -m tools.mutations --only "ring cost"
    python -m tools.mutations --lab 03        # lab 3's: its notebook, its package or its tests
    python -m tools.mutations --list          # name, file, the wrong code it stands for, targets

Each mutation is one exact snippet of a library instrument or of a lab's taught cell and the
wrong code a plausible mistake would put there. For each, the tracked files of the working tree
are copied to a temporary directory, the snippet is replaced there (never in the checkout), and
the mutation's pytest targets run against the copy (``PYTHONPATH`` set to it, ``LAB_SIZE=smoke``,
notebooks under nbval as ``make test`` runs them). Caught: pytest failed. SURVIVED: it passed, so
a ✓ stands that wrong code does not break. Each distinct target set first runs on the unmutated
copy and must pass. A snippet that does not occur exactly once is stale: the tool says which and
exits non-zero, as it does when any mutation survives. In a notebook the snippet is replaced in
the source of the one code cell holding it.
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
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Mutation", "MUTATIONS", "StaleMutation", "probe", "copy_tree", "apply", "run_targets", "of_lab", "main"]

ROOT = Path(__file__).resolve().parent.parent
NBVAL = ["--nbval", "--nbval-current-env", "--nbval-sanitize-with", "tests/notebooks/nbval_sanitize.cfg"]


@dataclass(frozen=True)
class Mutation:
    name: str
    file: str  # relative to the repository root
    snippet: str  # must occur exactly once (in a notebook: in one code cell's source)
    wrong: str
    means: str  # the wrong code it stands for, in one line
    targets: tuple[str, ...]  # pytest arguments: the cheapest that must catch it


class StaleMutation(ValueError):
    """A mutation's snippet no longer occurs exactly once in its file."""


def _nb(lab: str) -> str:
    return f"labs/{lab}/{lab}.ipynb"


MUTATIONS: tuple[Mutation, ...] = (
    Mutation("overlap queue", "lab_utils/netmodel.py", "start = max(b.ready_s, free)", "start = b.ready_s",
             "a bucket's transfer starts when it is ready, though the link still carries the last one",
             ("tests/core/test_netmodel_overlap.py",)),
    Mutation("ring cost", "lab_utils/netmodel.py", "+ 2 * (p - 1) / p * nbytes / link.bandwidth_Bps",
             "+ nbytes / link.bandwidth_Bps", "ring all-reduce's bandwidth term without the 2(p-1)/p factor",
             ("tests/core/test_netmodel.py",)),
    Mutation("saved-bytes meter", "lab_utils/memory/__init__.py", "nbytes = storage.nbytes()",
             "nbytes = t.numel()", "a tensor saved for backward counted as numel, not bytes",
             ("tests/core/test_memory.py",)),
    Mutation("saved-bytes identity", "lab_utils/memory/__init__.py", "key = storage._cdata  #",
             "key = storage.data_ptr()  #", "a saved storage known by its address: one FSDP2 freed and reused counts 0",
             ("tests/labs/lab07_fsdp/test_saved_meter.py",)),
    Mutation("memory calculator", "lab_utils/memory/shape.py", 'states = {"adamw": 2,', 'states = {"adamw": 1,',
             "AdamW's optimizer state predicted as one moment per parameter instead of two",
             ("tests/core/test_gpt2_bert.py",)),
    Mutation("planner", "lab_utils/labs/lab01_checkpointing/planner.py", "alive = k + seg_act + _out(inp, i)",
             "alive = k + inp[j] + _out(inp, i)", "a rebuilt segment's peak counted without its recomputed activations",
             ("tests/labs/lab01_checkpointing/test_planner.py",)),
    Mutation("comm bytes", "lab_utils/comm.py", "nbytes = sum(t.numel() * t.element_size() for t in tensors)",
             "nbytes = sum(t.numel() for t in tensors)", "a collective's payload counted as numel, not bytes",
             ("tests/core/test_comm.py",)),
    Mutation("rank order", "lab_utils/launcher/__init__.py",
             "return [_read_result(workdir, r)[1] for r in range(world)]",
             "return [_read_result(workdir, r)[1] for r in reversed(range(world))]",
             "launch returns the ranks' results in another order than rank order",
             ("tests/core/test_launch.py", "-k", "rank_order")),
    Mutation("ZeRO grads", "lab_utils/labs/lab07_fsdp/holdings.py", '"grads": shard if stage >= 2 else param_bytes',
             '"grads": shard if stage >= 1 else param_bytes', "ZeRO-1 counted as sharding the gradients too",
             ("tests/core/test_plan.py", "-k", "zero_formula")),
    Mutation("bubble formula", "lab_utils/labs/lab06_pipeline/timeline.py", "return (p - 1) / (m + p - 1)",
             "return (p - 1) / m", "GPipe's bubble as (p-1)/m instead of (p-1)/(m+p-1)",
             ("tests/labs/lab06_pipeline/test_timeline.py",)),
    Mutation("bubble split", "lab_utils/labs/lab06_pipeline/timeline.py",
             "return Idle(formula(p, m), (p - 1) * (2 * t_f + t_b) / (2 * step))",
             "return Idle(formula(p, m), formula(p, m))",
             "the whole of GPipe's bubble counted as blocked in a receive (no tail after the last send)",
             ("tests/labs/lab06_pipeline/test_timeline.py",)),
    Mutation("schedule tail", "lab_utils/labs/lab06_pipeline/timeline.py",
             "before_last = sum(max(e.end for e in ev) - t0 - busy_seconds(ev) for ev in stages)",
             "before_last = sum(t1 - t0 - busy_seconds(ev) for ev in stages)",
             "a stage's idle time after its last piece counted as waiting in a receive",
             ("tests/labs/lab06_pipeline/test_timeline.py",)),
    Mutation("summed loss", "lab_utils/labs/lab02_accumulation/losses.py", ".flatten(1).mean(1).sum()",
             ".flatten(1).mean(1).mean()", "mse_sum returns the batch's mean, not its sum over samples",
             ("tests/labs/lab02_accumulation/test_losses.py",)),
    Mutation("cmp's tolerance", "lab_utils/checks.py", '"close" if diff <= atol else', '"close" if diff <= 1e-3 else',
             "cmp ignores atol= and calls anything within a loose 1e-3 close",
             ("tests/core/test_core.py", "-k", "cmp")),
    Mutation("lab 2 / K", _nb("02_gradient_accumulation"), "loss = F.mse_loss(model(xb), yb) / K   #",
             "loss = F.mse_loss(model(xb), yb)   #", "plain_loop without / K: .grad holds K times the mean",
             (_nb("02_gradient_accumulation"),)),
    Mutation("lab 3 / k", _nb("03_ddp_no_sync"), "loss = F.mse_loss(ddp_model(x), y) / k        # outside",
             "loss = F.mse_loss(ddp_model(x), y)        # outside", "no_sync_update's last micro-step without / k",
             (_nb("03_ddp_no_sync"),)),
    Mutation("lab 5 /= world", _nb("05_local_sgd"), "        p.data /= world   ", "        pass  # /= world",
             "average_parameters sums the ranks' parameters and never divides", (_nb("05_local_sgd"),)),
    Mutation("lab 7 sync toggle", _nb("07_fsdp_accumulation"), "set_requires_gradient_sync(i == k - 1)",
             "set_requires_gradient_sync(i == 0)", "update_sync_last syncs on the first micro-step, not the last",
             (_nb("07_fsdp_accumulation"),)),
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
    """True when ``m`` mutates or is caught in lab ``lab`` ("03"): its notebook's folder, its package
    ``lab_utils/labs/lab03_*`` or its tests ``tests/labs/lab03_*``."""
    nn = f"{int(lab):02d}"
    places = (f"labs/{nn}_", f"lab_utils/labs/lab{nn}_", f"tests/labs/lab{nn}_")
    return any(path.startswith(places) for path in (m.file, *m.targets))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.mutations", description=__doc__.split("\n")[0])
    parser.add_argument("--only", metavar="NAME", help="run one mutation (its name as --list shows it)")
    parser.add_argument("--lab", metavar="NN", help="only the mutations of lab NN (its notebook, package or tests)")
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


if __name__ == "__main__":
    sys.exit(main())
