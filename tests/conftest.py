"""Shared fixtures: the process-table check that no rank outlives its test."""
from __future__ import annotations

import os
import time

import pytest


def rank_processes() -> list[tuple[int, str]]:
    """(pid, command line) of every live process started by lab_utils.launch or lab_utils.run."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and ("lab_utils._rank" in cmd or "lab_utils.run" in cmd):
            found.append((int(pid), cmd))
    return found


def wait_no_ranks(timeout: float = 10.0) -> list[tuple[int, str]]:
    deadline = time.monotonic() + timeout
    while (left := rank_processes()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


@pytest.fixture
def no_orphans():
    """Fails the test if any rank process is still alive shortly after it."""
    assert not rank_processes(), "rank processes were alive before the test started"
    yield
    left = wait_no_ranks()
    assert not left, f"processes left behind: {left}"


def cuda_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0
