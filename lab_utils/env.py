"""Where a lab runs: its size (student or smoke), its device, and the versions it runs on.

from lab_utils.env import pick, device, versions
n_blocks = pick(student=32, smoke=8)   # LAB_SIZE=smoke (set by the test suite) takes the second
"""

from __future__ import annotations

import os
import platform
from typing import TypeVar

import torch

__all__ = ["lab_size", "pick", "device", "versions", "SIZES"]

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
