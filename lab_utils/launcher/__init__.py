"""Run a function on several real processes, each inside a torch.distributed process group.

    def hello(scale):                        # may be defined in a notebook cell
        t = torch.ones(1) * dist.get_rank()
        dist.all_reduce(t)                   # a real collective between real processes
        return scale * t.item()

    launch(hello, world_size=3, args=(10,))  # -> [30.0, 30.0, 30.0]; .backend == "gloo"

Each rank is a process of its own, never a copy of the caller, so nothing is inherited from the
kernel and a script needs no ``__main__`` guard. On Linux ranks fork from a warm process that has
imported torch (``warm_start``); elsewhere, or with ``LAB_UTILS_WARM_START=0``, each is a fresh
interpreter. CUDA is initialised only in the ranks. ``fn`` travels by value (cloudpickle), so a
cell's function works. The rank comes from ``torch.distributed``, so ``fn`` also runs under
``torchrun`` (``run.py``). A rank that raises gives ``RankError`` with its traceback; one that
dies, or a run past ``timeout``, ``RankDiedError`` / ``LaunchTimeout``; on any exit, KeyboardInterrupt
included, every worker is killed and reaped.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import cloudpickle
import torch

from lab_utils.env import DistInfo, dist_info, threads_per_rank  # DistInfo, dist_info re-exported
from lab_utils.launcher import warm_start
from lab_utils.launcher._worker import result_path
from lab_utils.launcher.errors import LaunchTimeout, RankDiedError, RankError

__all__ = [
    "launch",
    "dist_info",
    "DistInfo",
    "RankResults",
    "free_port",
    "resolve_backend",
    "max_world_size",
]

BACKENDS = ("auto", "gloo", "nccl")
_RANK_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_rank.py")


class RankResults(list):
    """The ranks' return values in rank order (a plain list), plus how they were produced."""

    backend: str = ""
    world_size: int = 0
    seconds: float = float("nan")


def max_world_size() -> int:
    """The most CPU ranks ``launch`` accepts here: each rank is a whole Python process with
    torch loaded (~300 MB), so far beyond the core count only thrashes the machine."""
    return max(8, 4 * (os.cpu_count() or 1))


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now (chosen by the OS)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def resolve_backend(backend: str, world_size: int) -> str:
    """'gloo' or 'nccl' for ``backend`` in {'auto', 'gloo', 'nccl'}.

    'auto' picks nccl only when every rank can have its own GPU; with fewer GPUs than ranks
    (or none) it picks gloo on the CPU. An explicit 'nccl' without enough GPUs is an error."""
    if not isinstance(backend, str) or backend.lower() not in BACKENDS:
        raise ValueError(
            f"backend={backend!r} is not one of {BACKENDS}; use 'auto' to pick "
            f"nccl when every rank has a GPU and gloo otherwise"
        )
    backend = backend.lower()
    if backend == "gloo":
        return "gloo"
    n_gpus = _cuda_device_count()
    if backend == "nccl" and n_gpus < world_size:
        raise ValueError(
            f"backend='nccl' needs one CUDA GPU per rank, but world_size={world_size} "
            f"and this machine has {n_gpus} GPU(s). Use backend='gloo' (CPU) or "
            f"world_size<={n_gpus}."
            if n_gpus
            else "backend='nccl' needs CUDA GPUs and none is visible here. Use backend='gloo' (CPU) or 'auto'."
        )
    return "nccl" if n_gpus >= world_size and n_gpus > 0 else "gloo"


def _cuda_device_count() -> int:
    # Counting devices without initialising CUDA in the caller (a forked or later spawn would
    # otherwise inherit an initialised context).
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _check_args(fn, world_size, args, kwargs, timeout) -> bytes:
    if not callable(fn):
        raise TypeError(
            f"fn must be callable, got {type(fn).__name__}; pass the function itself, "
            f"not its result (launch(train), not launch(train()))"
        )
    if isinstance(world_size, bool) or not isinstance(world_size, int):
        raise TypeError(f"world_size must be an int, got {world_size!r}")
    if world_size < 1:
        raise ValueError(f"world_size={world_size}: need at least 1 rank (2-4 are typical here)")
    if world_size > max_world_size():
        raise ValueError(
            f"world_size={world_size} is more ranks than this machine can run "
            f"({os.cpu_count()} cores; the limit is {max_world_size()}). Each rank is a "
            f"full process: use 2-4 ranks to see the effects the labs measure."
        )
    if not isinstance(args, (tuple, list)):
        raise TypeError(
            f"args must be a tuple of positional arguments, got {type(args).__name__}; for one argument write args=(x,)"
        )
    if kwargs is not None and not isinstance(kwargs, dict):
        raise TypeError(f"kwargs must be a dict or None, got {type(kwargs).__name__}")
    if not (isinstance(timeout, (int, float)) and timeout > 0):
        raise ValueError(f"timeout={timeout!r}: give a positive number of seconds")
    # Pickle each piece separately so the error names the argument that cannot travel.
    pieces = [("fn", fn)] + [(f"args[{i}]", a) for i, a in enumerate(args)]
    pieces += [(f"kwargs[{k!r}]", v) for k, v in (kwargs or {}).items()]
    for name, value in pieces:
        try:
            cloudpickle.dumps(value)
        except Exception as e:  # noqa: BLE001 - re-raised with the argument's name
            raise TypeError(
                f"{name} cannot be sent to a worker process ({type(e).__name__}: {e}). "
                f"Pass plain data (tensors, numbers, dicts) and build objects such as "
                f"open files, locks, generators or process groups inside fn."
            ) from e
    return cloudpickle.dumps((fn, tuple(args), dict(kwargs or {})))


def launch(
    fn: Callable[..., Any],
    world_size: int = 2,
    *,
    backend: str = "auto",
    args: Sequence[Any] = (),
    kwargs: dict[str, Any] | None = None,
    timeout: float = 120.0,
) -> RankResults:
    """Run ``fn(*args, **kwargs)`` on ``world_size`` processes and return their results.

    Each process joins one process group (``backend``: 'gloo' on CPU, 'nccl' with one GPU per
    rank, 'auto' to choose; the choice is in ``result.backend``). Inside ``fn`` use
    ``torch.distributed.get_rank()`` or ``dist_info()``. Returns a list of the ranks' return
    values in rank order. ``timeout`` (seconds) bounds the whole run, including start-up
    (about a second; 2-3 s per rank when the warm start is off)."""
    payload = _check_args(fn, world_size, args, kwargs, timeout)
    chosen = resolve_backend(backend, world_size)
    port = free_port()
    threads = threads_per_rank(world_size)
    workdir = tempfile.mkdtemp(prefix="lab_utils_launch_")
    with open(os.path.join(workdir, "payload.pkl"), "wb") as f:
        f.write(payload)
    procs: list[Any] = []
    envs: list[dict] = []
    t0 = time.perf_counter()
    try:
        for rank in range(world_size):
            env = dict(
                os.environ,
                OMP_NUM_THREADS=str(threads),
                MKL_NUM_THREADS=str(threads),
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(port),
                RANK=str(rank),
                WORLD_SIZE=str(world_size),
                LOCAL_RANK=str(rank),
                LOCAL_WORLD_SIZE=str(world_size),
            )
            if chosen == "gloo":
                # Interface autodetection is flaky on CI machines; all ranks are on this host.
                env.setdefault("GLOO_SOCKET_IFNAME", "lo")
            # The caller's import path, as multiprocessing's spawn passes it: a function that
            # cloudpickle sends by reference (an importable one) must import in the rank too.
            env["PYTHONPATH"] = os.pathsep.join([p or os.getcwd() for p in sys.path])
            envs.append(env)
        procs = _start_ranks(envs, workdir, chosen, threads, timeout)
        results = _wait(procs, workdir, timeout, t0)
    finally:
        _stop(procs)
        shutil.rmtree(workdir, ignore_errors=True)
    out = RankResults(results)
    out.backend, out.world_size, out.seconds = chosen, world_size, time.perf_counter() - t0
    return out


def _start_ranks(envs: list[dict], workdir: str, backend: str, threads: int, timeout: float) -> list[Any]:
    """The ranks, forked by the warm process when it can (see _zygote.py), else fresh
    interpreters. Either way each leads its own process group, so the parent can kill a rank
    and anything it started."""
    if warm_start.enabled():
        reqs = [
            dict(workdir=workdir, rank=r, backend=backend, threads=threads, timeout=timeout, env=env)
            for r, env in enumerate(envs)
        ]
        with contextlib.suppress(OSError):
            return warm_start.fork_ranks(reqs)
    cmd = [sys.executable, _RANK_SCRIPT, workdir, backend, str(threads), str(timeout), str(os.getpid())]
    return [subprocess.Popen(cmd, env=env, process_group=0, stdin=subprocess.DEVNULL) for env in envs]


_SECONDARY = ("Connection reset", "Connection closed", "Broken pipe", "NCCL communicator was aborted")


def _wait(procs: list[Any], workdir: str, timeout: float, t0: float) -> list[Any]:
    """Poll until every rank has exited; fail fast on the first error, death or the deadline."""
    world = len(procs)
    while True:
        exited = [r for r, p in enumerate(procs) if p.poll() is not None]
        failed = [r for r in exited if _read_result(workdir, r)[0] != "ok"]
        if failed:
            # When one rank fails, its peers often fail next with a broken connection. Give
            # them a moment, then report the root cause: a rank that died without a word,
            # else an error that is not just a lost peer.
            time.sleep(0.3)
            exited = [r for r, p in enumerate(procs) if p.poll() is not None]
            died = [r for r in exited if _read_result(workdir, r)[0] is None]
            if died:
                raise RankDiedError(died[0], procs[died[0]].returncode)
            errors = [(r, _read_result(workdir, r)[1]) for r in exited if _read_result(workdir, r)[0] == "error"]
            primary = [e for e in errors if not any(m in e[1][1] for m in _SECONDARY)] or errors
            rank, (exc_type, message, tb) = primary[0]
            raise RankError(rank, exc_type, message, tb)
        if len(exited) == world:
            return [_read_result(workdir, r)[1] for r in range(world)]
        if time.perf_counter() - t0 > timeout:
            # A rank that has returned fn's result (written to a .tmp file until its group is torn
            # down) and waits at exit for its peers is not the stuck one.
            stuck = [r for r in range(world) if procs[r].poll() is None and not _returned(workdir, r)]
            done = [r for r in range(world) if r not in stuck]
            returned = f" (ranks {done} had returned fn's result)" if done else ""
            raise LaunchTimeout(
                f"ranks {stuck} did not finish within timeout={timeout:g} s{returned}. A rank "
                f"that waits in a collective its peers never reach hangs like this "
                f"(e.g. an all_reduce inside `if rank == 0`). All ranks were stopped; "
                f"raise timeout= if the work is just slow."
            )
        time.sleep(0.02)


def _returned(workdir: str, rank: int) -> bool:
    path = result_path(workdir, rank)
    return os.path.exists(path) or os.path.exists(path + ".tmp")


def _read_result(workdir: str, rank: int) -> tuple[str | None, Any]:
    path = result_path(workdir, rank)
    if not os.path.exists(path):
        return None, None
    with open(path, "rb") as f:
        return pickle.load(f)


def _stop(procs: list[Any]) -> None:
    """Terminate, then kill, every worker and its process group; reap them all."""
    for p in procs:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + 3.0
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
    for p in procs:
        # The rank may be gone while a child of its group lives on: kill the group regardless.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=5)
