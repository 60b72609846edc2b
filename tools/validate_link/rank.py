"""The rank side of ``tools.validate_link.run``: one gloo rank inside its network namespace.

    ip netns exec NS python -m tools.validate_link.rank WORKDIR   # started by run.run, at the repository root

It reads ``WORKDIR/config.json``, stamps the typical micro-step on the unshaped veth, then for
each link speed shapes its own end (tc tbf), calibrates the link, measures the contention and
times the loops (every update stamped, ``stamps.UpdateStamps``), and writes ``WORKDIR/rank<r>.json``.
"""

from __future__ import annotations

import json
import math
import os
import resource
import statistics
import sys
import threading
import time
from dataclasses import asdict
from datetime import timedelta
from pathlib import Path

from lab_utils.labs.lab03_ddp.reallink import Config
from tools.validate_link.netns import ADDR, PORT, shape

__all__ = ["main"]


def main(work: str) -> None:
    import torch
    import torch.distributed as dist

    from lab_utils.data import micro_batches
    from lab_utils.labs.lab03_ddp import stamps, workload
    from lab_utils.labs.lab03_ddp.stamps import UpdateStamps

    raw = json.loads(Path(work, "config.json").read_text())
    cfg = Config(**{k: tuple(v) if isinstance(v, list) else v for k, v in raw.items()})
    rank = int(os.environ["RANK"])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://{ADDR[0]}:{PORT}", rank=rank, world_size=2,
                            timeout=timedelta(seconds=cfg.timeout_s))  # fmt: skip
    setup = workload.Setup(width=cfg.width, depth=cfg.depth, micro_batch=cfg.micro_batch)
    loops = {"naive": _naive, "no_sync": _no_sync, "compute": _compute_only}
    loopback = stamps.measure(ks=(8,), repeats=3, bucket_cap_mb=cfg.bucket_cap_mb, setup=setup)
    micro = stamps.micro_step(loopback)
    bwd = torch.tensor([micro.backward_s], dtype=torch.float64)  # the slowest rank's median backward
    dist.all_reduce(bwd, op=dist.ReduceOp.MAX)
    sizes = [int(b.nbytes) for b in micro.buckets]
    grad_bytes = sum(sizes)
    ddp = workload.wrap(workload.model(setup), cfg.bucket_cap_mb)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-4)
    rec = UpdateStamps().attach(ddp, opt)
    kmax = max(cfg.ks)
    x, y = workload.dataset(kmax * 2 * setup.micro_batch, setup)
    mbs = micro_batches(x, y, k=kmax, rank=rank, world_size=2)
    links = []
    for r in cfg.rounds:
        rate_Bps = grad_bytes / (r * bwd.item())  # a 2-rank ring moves each byte once per rank
        shape(os.environ["GLOO_SOCKET_IFNAME"], rate_Bps)
        dist.barrier()
        alpha, beta, bulk_s = _calibrate(grad_bytes)
        round_s = _round(sizes)
        contention = _contention(ddp.module, mbs[0], sizes, round_s)
        _naive(ddp, opt, mbs[:1])  # warm-up on this link
        walls: dict[str, dict[str, list[float]]] = {}
        stamps: dict[str, dict[str, list[dict]]] = {}  # every update's stamps (stamps.Update)
        for k in cfg.ks:
            walls[str(k)] = {name: [] for name in loops}
            stamps[str(k)] = {name: [] for name in loops}
            for _ in range(cfg.repeats):
                for name, update in loops.items():  # alternating, so a slow spell hits both loops
                    dist.barrier()
                    rec.begin()
                    update(ddp, opt, mbs[:k])
                    stamped = rec.end()
                    walls[str(k)][name].append(stamped.end - stamped.begin)
                    stamps[str(k)][name].append(asdict(stamped))
            rec.updates.clear()
        links.append({"rate_mbit": 8 * rate_Bps / 1e6, "alpha_s": alpha, "beta_Bps": beta, "bulk_s": bulk_s,
                      "round_s": round_s, "contention": contention, "walls": walls, "stamps": stamps})  # fmt: skip
    out = {"micro": asdict(micro), "optimizer_s": loopback.optimizer_step_s, "links": links}
    Path(work, f"rank{rank}.json").write_text(json.dumps(out))
    del ddp, opt
    dist.barrier()
    dist.destroy_process_group()


def _timed_allreduce(t) -> float:
    import torch.distributed as dist

    t0 = time.perf_counter()
    dist.all_reduce(t)
    return time.perf_counter() - t0


def _calibrate(nbytes: int, tiny_reps: int = 21, bulk_reps: int = 5) -> tuple[float, float, float]:
    """Latency and bandwidth of this link for the ring model, from a tiny and a bulk all-reduce:
    tiny = 2 (p-1) alpha, bulk - tiny = 2 (p-1)/p n / beta (p = 2)."""
    import torch
    import torch.distributed as dist

    tiny, bulk = torch.zeros(1), torch.zeros(nbytes // 4)
    for _ in range(3):
        _timed_allreduce(tiny)
    dist.barrier()
    t_tiny = statistics.median(_timed_allreduce(tiny) for _ in range(tiny_reps))
    _timed_allreduce(bulk)
    dist.barrier()
    t_bulk = statistics.median(_timed_allreduce(bulk) for _ in range(bulk_reps))
    return t_tiny / 2, nbytes / max(t_bulk - t_tiny, 1e-9), t_bulk


def _rounds(bufs: list) -> float:
    """Seconds of one round of all-reduces of ``bufs``, launched back to back and asynchronously
    as DDP launches its buckets."""
    import torch.distributed as dist

    t0 = time.perf_counter()
    for w in [dist.all_reduce(b, async_op=True) for b in bufs]:
        w.wait()
    return time.perf_counter() - t0


def _round(sizes: list[int], reps: int = 7) -> float:
    """Seconds of one round of the real buckets' all-reduces on the idle link (no compute)."""
    import torch
    import torch.distributed as dist

    bufs = [torch.zeros(n // 4) for n in sizes]

    def once() -> float:
        dist.barrier()
        return _rounds(bufs)

    once()
    return statistics.median(once() for _ in range(reps))


def _contention(module, batch, sizes: list[int], round_s: float, reps: int = 7) -> list[float]:
    """[compute, comm, compute_cpu, preempted_alone, preempted_beside]: the slowdowns of a forward
    + backward timed alone and while rounds of the real buckets' all-reduces run in another
    thread (both ranks), of such a round alone (``round_s``) and beside the compute, and of the
    compute thread's own CPU time (user + kernel, ``getrusage(RUSAGE_THREAD)``); then the median
    involuntary context switches of that thread per compute, alone and beside (the network stack
    and gloo's threads taking its core). The rounds last about 2 x ``reps`` computes, so every
    link gets about as many contended samples."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    x, y = batch

    def compute() -> tuple[float, float, int]:
        t0, r0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_THREAD)
        F.mse_loss(module(x), y).backward()
        r1 = resource.getrusage(resource.RUSAGE_THREAD)
        cpu = r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime
        return time.perf_counter() - t0, cpu, r1.ru_nivcsw - r0.ru_nivcsw

    compute()
    alone_runs = [compute() for _ in range(reps)]
    alone, alone_cpu, alone_cs = (statistics.median(run[i] for run in alone_runs) for i in (0, 1, 2))
    n = torch.tensor([float(max(3, math.ceil(2 * reps * alone / round_s)))])  # float32 on every rank
    dist.all_reduce(n, op=dist.ReduceOp.MAX)
    comm: list[float] = []
    bufs = [torch.zeros(s // 4) for s in sizes]
    dist.barrier()
    thread = threading.Thread(target=lambda: comm.extend(_rounds(bufs) for _ in range(int(n.item()))))
    thread.start()
    beside = []
    while thread.is_alive():
        t = compute()
        if thread.is_alive():  # it ended with the transfers still running: fully contended
            beside.append(t)
    thread.join()
    module.zero_grad(set_to_none=True)
    beside = beside or [(alone, alone_cpu, alone_cs)]
    wall, cpu, switches = (statistics.median(run[i] for run in beside) for i in (0, 1, 2))
    slow_comm = statistics.median(comm[:-1] or comm) / round_s - 1
    return [max(0.0, wall / alone - 1), max(0.0, slow_comm), cpu / max(alone_cpu, 1e-9) - 1, alone_cs, switches]


def _compute_only(ddp, opt, micro_batches) -> None:
    """The same compute with no communication at all: the machine's speed at that moment."""
    import torch.nn.functional as F

    opt.zero_grad()
    with ddp.no_sync():
        for x, y in micro_batches:
            (F.mse_loss(ddp(x), y) / len(micro_batches)).backward()
    opt.step()


def _naive(ddp, opt, micro_batches) -> None:
    import torch.nn.functional as F

    opt.zero_grad()
    for x, y in micro_batches:
        (F.mse_loss(ddp(x), y) / len(micro_batches)).backward()
    opt.step()


def _no_sync(ddp, opt, micro_batches) -> None:
    import torch.nn.functional as F

    opt.zero_grad()
    for x, y in micro_batches[:-1]:
        with ddp.no_sync():
            (F.mse_loss(ddp(x), y) / len(micro_batches)).backward()
    x, y = micro_batches[-1]
    (F.mse_loss(ddp(x), y) / len(micro_batches)).backward()
    opt.step()


if __name__ == "__main__":
    main(sys.argv[1])
