"""Time per update against K: measured compute plus the collectives each loop made, then the
time those collectives would take on a simulated link.

    from lab_utils import launch
    from lab_utils.simnet import LINKS
    from lab_utils.topics.ddp import sweep
    loops = {"naive": naive_update, "no_sync": no_sync_update}      # the notebook's functions
    got = launch(sweep.measure, 2, args=(loops,), kwargs={"ks": (1, 2, 4, 8)})[0]
    sweep.simulated(got, LINKS["1GbE"])      # {"k", "compute", "naive", "no_sync"}: seconds
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from lab_utils.comm import CommCounter
from lab_utils.launch import dist_info
from lab_utils.simnet import Link, simulate
from lab_utils.timing import Timer
from lab_utils.topics.ddp.workload import DEFAULT, Setup, UpdateFn, dataset, micro_batches, model, wrap

__all__ = ["measure", "simulated"]


def measure(
    loops: Mapping[str, UpdateFn],
    ks: Sequence[int] = (1, 2, 4, 8),
    *,
    repeats: int = 3,
    bucket_cap_mb: float | None = None,
    setup: Setup = DEFAULT,
) -> dict[str, Any]:
    """On this rank (call it on every rank): the compute of one update and, for each of ``loops``
    (name -> update function), the collectives and loopback seconds of one update, for each K.

    Compute: each micro-step is timed alone inside ``no_sync`` (no communication), ``repeats`` x
    max(ks) of them, and so is the optimizer step; one update's compute is K x the fastest
    micro-step + the fastest optimizer step (the fastest sample is the least disturbed on a shared
    machine). One warm-up backward first, so DDP has rebuilt its buckets before anything counts."""
    if not loops or not all(callable(f) for f in loops.values()):
        raise TypeError(f"loops must map names to update functions (ddp, optimizer, micro_batches), got {loops!r}")
    info = dist_info()
    ddp = wrap(model(setup), bucket_cap_mb)
    counter = CommCounter().attach(ddp)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-4)
    kmax = max(ks)
    x, y = dataset(kmax * info.world_size * setup.micro_batch, setup)
    mbs_all = micro_batches(x, y, 0, k=kmax, rank=info.rank, world_size=info.world_size, micro_batch=setup.micro_batch)
    mbs_all = [(a.to(info.device), b.to(info.device)) for a, b in mbs_all]
    for xb, yb in mbs_all[:2]:  # warm-up: the first backward runs before the bucket rebuild
        F.mse_loss(ddp(xb), yb).backward()
    micro_s, step_s = [], []
    for _ in range(repeats):
        opt.zero_grad(set_to_none=True)
        for xb, yb in mbs_all:
            with Timer() as t, ddp.no_sync():
                (F.mse_loss(ddp(xb), yb) / kmax).backward()
            micro_s.append(t.seconds)
        with Timer() as t:
            opt.step()
        step_s.append(t.seconds)
    rows = []
    for k in ks:
        row: dict[str, Any] = {"k": k, "compute_s": k * min(micro_s) + min(step_s)}
        for name, update in loops.items():
            times = []
            for _ in range(repeats):
                counter.reset()
                with Timer() as t:
                    update(ddp, opt, mbs_all[:k])
                times.append(t.seconds)
            row[f"{name}_s"] = min(times)
            row[f"{name}_events"] = [{"op": e.op, "nbytes": e.nbytes, "step": 0} for e in counter.events]
        rows.append(row)
    del ddp, opt, counter
    return {
        "loops": list(loops),
        "rows": rows,
        "micro_step_s": min(micro_s),
        "optimizer_step_s": min(step_s),
        "world_size": info.world_size,
        "backend": info.backend,
    }


def simulated(sweep: Mapping[str, Any], link: Link, world_size: int | None = None) -> dict[str, list[float]]:
    """Measured compute per update plus the *simulated* time, on ``link``, of the collectives each
    loop made, per K: ``{"k": [...], "compute": [...], <loop>: [...] for each loop}`` in seconds."""
    w = world_size or sweep["world_size"]
    out: dict[str, list[float]] = {"k": [], "compute": [], **{name: [] for name in sweep["loops"]}}
    for row in sweep["rows"]:
        out["k"].append(row["k"])
        out["compute"].append(row["compute_s"])
        for name in sweep["loops"]:
            out[name].append(row["compute_s"] + sum(simulate(row[f"{name}_events"], link, w)))
    return out
