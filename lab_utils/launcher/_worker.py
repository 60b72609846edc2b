"""The rank side of ``lab_utils.launch``: what one worker process does, from joining the group
to handing its result back (``_rank.py`` calls ``run_rank`` once the parent-death watch is armed).

    python lab_utils/launcher/_rank.py WORKDIR BACKEND THREADS TIMEOUT PPID     # started by launch(), not by hand

The result (``("ok", value)`` or ``("error", (type, message, traceback))``) is pickled to
``result_path(workdir, rank)``, written under a temporary name and renamed only after the
process group is torn down, so the parent never reads a half-finished rank.
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import os
import pickle
import traceback
from typing import Any

import cloudpickle
import torch
import torch.distributed as dist

__all__ = ["result_path", "run_rank", "cleanup_group"]


def result_path(workdir: str, rank: int) -> str:
    """Where rank ``rank`` leaves its pickled result."""
    return os.path.join(workdir, f"rank{rank}.pkl")


def run_rank(workdir: str, backend: str, threads: int, timeout: float) -> None:
    """Entry point of one rank: ``python lab_utils/launcher/_rank.py WORKDIR BACKEND THREADS TIMEOUT PPID``
    with MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE in the environment (set by ``launch``)."""
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    status: tuple[str, Any]
    try:
        torch.set_num_threads(threads)
        if backend == "nccl":
            torch.cuda.set_device(rank)
        dist.init_process_group(backend, rank=rank, world_size=world_size, timeout=datetime.timedelta(seconds=timeout))
        with open(os.path.join(workdir, "payload.pkl"), "rb") as f:
            fn, args, kwargs = cloudpickle.loads(f.read())
        value = fn(*args, **kwargs)
        status = ("ok", value)
    except BaseException as e:  # noqa: BLE001 - every failure goes back to the parent
        status = ("error", (type(e).__name__, str(e), traceback.format_exc()))
    try:
        blob = pickle.dumps(status)
    except Exception:  # the result itself cannot travel back: try cloudpickle, then explain
        try:
            blob = cloudpickle.dumps(status)
        except Exception as e:  # noqa: BLE001
            blob = pickle.dumps(
                (
                    "error",
                    (
                        "TypeError",
                        f"the return value of fn on rank {rank} "
                        f"cannot be pickled ({e}); return plain data (numbers, lists, "
                        f"dicts, CPU tensors)",
                        "",
                    ),
                )
            )
    tmp = result_path(workdir, rank) + ".tmp"
    with open(tmp, "wb") as f:
        f.write(blob)
    cleanup_group(ok=status[0] == "ok")
    os.replace(tmp, result_path(workdir, rank))  # visible only once the group is torn down
    # Skip interpreter teardown: gloo's C++ destructors can abort at exit ("terminate called
    # without an active exception") even after a clean destroy_process_group.
    os._exit(0)


def cleanup_group(ok: bool) -> None:
    """Free models and the group in the order that avoids gloo's abort at exit."""
    gc.collect()
    try:
        if dist.is_initialized():
            if ok:
                # Wait for the others before tearing down, so no peer is mid-collective.
                with contextlib.suppress(Exception):
                    if dist.get_backend() == "nccl":
                        dist.barrier(device_ids=[torch.cuda.current_device()])
                    else:
                        dist.barrier()
            dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - the result is already written
        pass
