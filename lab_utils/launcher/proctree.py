"""A process and everything it started, from /proc (Linux): launchers such as ``torchrun`` and
``accelerate launch`` start their ranks in new sessions, so killing the launcher's process
group leaves the ranks running; on a timeout, kill the whole tree instead."""

from __future__ import annotations

import os
import signal

__all__ = ["descendants", "kill_tree"]


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                kids.setdefault(int(fields[1]), []).append(int(d))
    return kids


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (children, their children, ...); empty without /proc."""
    kids, out, todo = _children(), set(), [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and every process below it (found first, so none is reparented away)."""
    for p in [*descendants(pid), pid]:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
