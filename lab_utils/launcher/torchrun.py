"""Run a lab's training function under ``torchrun``: one node, or several machines.

    # one machine, 2 processes
    torchrun --standalone --nproc_per_node=2 -m lab_utils.launcher.torchrun lab_utils.launcher.examples:allreduce_demo
    # two machines (run on each; NODE_RANK=0 on the first, 1 on the second; MASTER = first's address)
    torchrun --nnodes=2 --node_rank=$NODE_RANK --nproc_per_node=2 \\
        --rdzv_backend=static --master_addr=$MASTER --master_port=29500 \\
        -m lab_utils.launcher.torchrun lab_utils.launcher.examples:allreduce_demo --kwargs '{"n": 4}'

What ``launch`` runs from a notebook runs here unchanged (it reads its rank from ``torch.distributed``);
rank 0's return value is printed as JSON. A notebook cell's function has no module: save it with
``lab_utils.launcher.torchrun.save_function(train, "train.pkl")``, then
``... -m lab_utils.launcher.torchrun train.pkl`` (copy it to every machine). Options:
``--kwargs JSON``, ``--backend auto|gloo|nccl``, ``--out FILE``.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import importlib
import json
import os
import sys
from collections.abc import Callable
from typing import Any

import cloudpickle
import torch
import torch.distributed as dist

from lab_utils.env import dist_info, threads_per_rank
from lab_utils.launcher import resolve_backend

__all__ = ["load_function", "save_function", "main"]


def save_function(fn: Callable[..., Any], path: str) -> str:
    """Write ``fn`` by value (cloudpickle: its code and the notebook functions it calls) to
    ``path``, so that ``torchrun -m lab_utils.launcher.torchrun PATH`` can run a function typed into a cell."""
    with open(path, "wb") as f:
        cloudpickle.dump(fn, f)
    return path


def load_function(spec: str) -> Callable[..., Any]:
    """Import ``package.module:function`` (the form torchrun users type), or load a function
    saved by ``save_function`` (a path ending in ``.pkl``)."""
    if spec.endswith(".pkl"):
        try:
            with open(spec, "rb") as f:
                fn = cloudpickle.load(f)
        except OSError as e:
            raise SystemExit(
                f"lab_utils.launcher.torchrun: cannot read {spec!r} ({e}); copy it to every machine"
            ) from e
        if not callable(fn):
            raise SystemExit(f"lab_utils.launcher.torchrun: {spec!r} holds a {type(fn).__name__}, not a function")
        return fn
    if ":" not in spec:
        raise SystemExit(f"lab_utils.launcher.torchrun: {spec!r} should look like package.module:function or FILE.pkl")
    mod_name, fn_name = spec.split(":", 1)
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as e:
        raise SystemExit(f"lab_utils.launcher.torchrun: cannot import {mod_name!r} ({e}); is it on PYTHONPATH?") from e
    fn = getattr(mod, fn_name, None)
    if not callable(fn):
        raise SystemExit(f"lab_utils.launcher.torchrun: {mod_name!r} has no function {fn_name!r}")
    return fn


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lab_utils.launcher.torchrun", description=__doc__.split("\n")[0])
    ap.add_argument("function", help="package.module:function, or FILE.pkl from save_function, to run on every rank")
    ap.add_argument("--kwargs", default="{}", help="JSON object of keyword arguments")
    ap.add_argument("--backend", default="auto", choices=("auto", "gloo", "nccl"))
    ap.add_argument("--timeout", type=float, default=300.0, help="collective timeout in seconds")
    ap.add_argument("--out", default=None, help="rank 0 also writes its JSON result to this file")
    a = ap.parse_args(argv)
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        raise SystemExit(
            "lab_utils.launcher.torchrun: RANK/WORLD_SIZE are not set. Start it with torchrun, e.g. "
            "torchrun --standalone --nproc_per_node=2 -m lab_utils.launcher.torchrun mod:fn "
            "(or call lab_utils.launch(fn) from Python)."
        )
    try:
        kwargs = json.loads(a.kwargs)
    except json.JSONDecodeError as e:
        raise SystemExit(f"lab_utils.launcher.torchrun: --kwargs is not valid JSON ({e})") from e
    fn = load_function(a.function)

    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    backend = resolve_backend(a.backend, local_world)  # the rule launch() follows, per machine
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
    torch.set_num_threads(threads_per_rank(local_world))
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=a.timeout))
    try:
        result = fn(**kwargs)
        if dist_info().rank == 0:
            text = json.dumps(result, default=str)
            print(text, flush=True)
            if a.out:
                with open(a.out, "w") as f:
                    f.write(text)
        dist.barrier()
    finally:
        gc.collect()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    code = main()
    # Skip the interpreter's teardown: torch 2.13's gloo can abort there ("terminate called without
    # an active exception": a gloo thread frees a finished collective while Python shuts down),
    # about one run in 15 on a busy CPU, after the result is printed. Nothing is left to do.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
