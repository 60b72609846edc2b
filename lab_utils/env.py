"""Where a lab runs: its size (student or smoke), its device, its rank, and the versions.

from lab_utils.env import pick, device, versions, dist_info
n_blocks = pick(student=32, smoke=8)   # LAB_SIZE=smoke (set by the test suite) takes the second
dist_info().rank                       # on a rank of launch() or torchrun; 0 in a single process
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import platform
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch
import torch.distributed as dist

__all__ = [
    "lab_size",
    "pins",
    "off_pins",
    "pick",
    "device",
    "versions",
    "dist_info",
    "DistInfo",
    "SIZES",
    "threads_per_rank",
    "quiet_native_output",
    "in_backward",
]

SIZES = ("student", "smoke")
T = TypeVar("T")


def lab_size() -> str:
    """'student' (the default, what a person runs) or 'smoke' (``LAB_SIZE=smoke``, what CI runs)."""
    size = os.environ.get("LAB_SIZE", "student").strip().lower() or "student"
    if size not in SIZES:
        raise ValueError(f"LAB_SIZE={size!r} is not one of {SIZES}; unset it for the student size")
    return size


def pick(*, student: T, smoke: T) -> T:
    """The value for the current lab size: ``student`` by default, ``smoke`` under LAB_SIZE=smoke."""
    return smoke if lab_size() == "smoke" else student


def device() -> torch.device:
    """cuda when a GPU is visible, else cpu (labs print which one their numbers mean)."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def versions() -> dict[str, str]:
    """Versions of Python and the stack the labs are pinned to."""
    out = {"python": platform.python_version(), "torch": torch.__version__}
    for name in ("transformers", "accelerate", "plotly", "ipywidgets", "nbval", "jupyterlab"):
        try:
            out[name] = __import__(name).__version__
        except Exception:  # noqa: BLE001 - a missing package is reported, not raised
            out[name] = "missing"
    return out


def pins() -> dict[str, str]:
    """What the stack is pinned to, ``{"torch": "==2.13.*", ...}``: the dependencies of the
    repository's ``pyproject.toml`` when ``lab_utils`` runs from a checkout, else those the
    installed package declares (extras left out)."""
    from packaging.requirements import Requirement

    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    if pyproject.is_file():
        import tomllib

        reqs = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["dependencies"]
    else:
        reqs = [r for r in (importlib.metadata.requires("lab-utils") or []) if "extra ==" not in r]
    return {(req := Requirement(r)).name: str(req.specifier) for r in reqs}


def off_pins() -> dict[str, str]:
    """The pinned packages whose installed version the pin does not allow (or that are missing):
    ``{"accelerate": "installed 1.14.0, pinned ==1.15.*"}``; empty when the stack is as pinned."""
    from packaging.specifiers import SpecifierSet

    out = {}
    for name, spec in pins().items():
        try:
            have = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = f"missing, pinned {spec}"
            continue
        if have not in SpecifierSet(spec, prereleases=True):
            out[name] = f"installed {have}, pinned {spec}"
    return out


@dataclass(frozen=True)
class DistInfo:
    rank: int
    world_size: int
    local_rank: int
    backend: str
    device: Any  # torch.device


def dist_info() -> DistInfo:
    """Rank, world size, local rank, backend and this rank's device, read from the process group
    (under ``launch`` or ``torchrun``) or describing a single process when there is none."""
    if dist.is_available() and dist.is_initialized():
        rank, world, backend = dist.get_rank(), dist.get_world_size(), dist.get_backend()
        local = int(os.environ.get("LOCAL_RANK", rank))
    else:
        rank, world, local, backend = 0, 1, 0, "none"
    dev = torch.device(f"cuda:{local}") if backend == "nccl" else torch.device("cpu")
    return DistInfo(rank, world, local, backend, dev)


def threads_per_rank(ranks_here: int) -> int:
    """Torch threads for each of ``ranks_here`` ranks on this machine: the cores shared out, at
    least one (more threads than cores make OpenMP spin-wait). ``launch`` and ``run`` both use it."""
    return max(1, (os.cpu_count() or 1) // max(ranks_here, 1))


@contextlib.contextmanager
def quiet_native_output():
    """Silence what C++ code writes to file descriptors 1 and 2 (the profiler logs a line at each
    start and stop). Python's buffers are flushed first; a notebook's prints, which write to no
    file descriptor, still show."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        os.dup2(null, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, null):
            os.close(fd)


def in_backward() -> bool:
    """True while autograd's engine is running a backward pass on this thread."""
    return torch._C._current_graph_task_id() != -1
