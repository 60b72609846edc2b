"""The caller's side of the warm start (``_zygote.py``): ranks forked from a process that has
already imported torch, instead of fresh interpreters that each import it again.

    warm_start.enabled()          # Linux, and LAB_UTILS_WARM_START is not "0"
    warm_start.stop()             # end the warm process (it also ends with this process)

Started once per process, and again when a ``lab_utils`` source file changed, so ranks never run
stale code. Why not multiprocessing's forkserver with torch preloaded? It starts ranks as fast,
but after ``kill -9`` of the caller its ranks ran on until their work ended (forever for a hung
one). Here the warm process dies with its caller (PR_SET_PDEATHSIG), each rank with the warm
process, and each rank leads its own process group so ``launch`` can kill what it started.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

__all__ = ["enabled", "fork_ranks", "stop", "ForkedRank"]

_SCRIPT = str(Path(__file__).with_name("_zygote.py"))
_SOURCES = Path(__file__).resolve().parents[1]  # all of lab_utils: a change anywhere restarts it
_lock = threading.Lock()
_zygote: subprocess.Popen | None = None
_owner = 0  # the pid that started it (a forked copy of the caller must not share its pipes)
_stamp = 0.0
# Imported by the warm process before it forks, if the caller has imported them: its ranks will
# most likely import them too, at 2-3 s of CPU each on a 2-core laptop.
PRELOAD = ("transformers", "accelerate")


def enabled() -> bool:
    return sys.platform.startswith("linux") and os.environ.get("LAB_UTILS_WARM_START", "1") != "0"


def _sources_stamp() -> float:
    return max(p.stat().st_mtime for p in _SOURCES.rglob("*.py"))


def stop() -> None:
    """End the warm process, if one runs (the next launch starts a fresh one)."""
    global _zygote
    if _zygote is not None and _owner == os.getpid():
        _zygote.kill()
        _zygote.wait()
    _zygote = None


def _ensure() -> subprocess.Popen:
    global _zygote, _owner, _stamp
    stamp = _sources_stamp()
    if _zygote is not None and (_owner != os.getpid() or _zygote.poll() is not None or stamp != _stamp):
        stop()
    if _zygote is None:
        proc = subprocess.Popen(
            [sys.executable, _SCRIPT, str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            process_group=0,  # a terminal's Ctrl-C goes to the caller, which stops the ranks
            env=dict(os.environ, PYTHONPATH=os.pathsep.join(p or os.getcwd() for p in sys.path)),
        )
        if proc.stdout.readline().strip() != "ready":
            proc.kill()
            proc.wait()
            raise OSError("the warm-start process did not start")
        _zygote, _owner, _stamp = proc, os.getpid(), stamp
    return _zygote


def fork_ranks(requests: list[dict]) -> list[ForkedRank]:
    """Ask the warm process for the ranks of one launch (each request: workdir, rank, backend,
    threads, timeout, env). All are forked by the same warm process, which is restarted only
    between launches. Raises OSError when it cannot (the caller then starts fresh interpreters)."""
    common = {
        "path": [p or os.getcwd() for p in sys.path],
        "cwd": os.getcwd(),
        "preload": [m for m in PRELOAD if m in sys.modules],
    }
    with _lock:
        zygote = _ensure()
        pids = []
        try:
            for req in requests:
                zygote.stdin.write(json.dumps({**req, **common}) + "\n")
                zygote.stdin.flush()
                pids.append(int(zygote.stdout.readline()))
        except BaseException as err:  # a half-read reply (or Ctrl-C mid-way) desyncs the pipe
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)
            stop()
            if isinstance(err, (OSError, ValueError)):
                raise OSError(f"the warm-start process failed ({err})") from err
            raise
    return [
        ForkedRank(pid, os.path.join(req["workdir"], f"rank{req['rank']}.exit")) for pid, req in zip(pids, requests)
    ]


class ForkedRank:
    """A rank forked by the warm process; the exit code arrives in a file it writes."""

    def __init__(self, pid: int, exit_file: str):
        self.pid, self._exit_file = pid, exit_file
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                with open(self._exit_file) as f:
                    self.returncode = int(f.read())
            except (OSError, ValueError):
                if not _alive(self.pid):
                    # Reaped a moment ago, its code not written yet; or its warm process is
                    # gone and took it along (then it was killed).
                    time.sleep(0.05)
                    try:
                        with open(self._exit_file) as f:
                            self.returncode = int(f.read())
                    except (OSError, ValueError):
                        self.returncode = -9
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout)
            time.sleep(0.01)
        return self.returncode


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
