"""One launch for the lab's rank-side tests (each launch costs seconds here): a hand-written
two-stage loop and torch's schedules under ``runs.measure``, and the P2P counter, on 2 ranks.

The loop below is the test's own copy of the lab's cell (the lab teaches it; the tests need a
fixed one to measure the instruments against)."""

from __future__ import annotations

import functools

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from lab_utils import launch
from lab_utils.labs.lab06_pipeline import exercises, runs, stages, traffic
from tests.labs.lab06_pipeline.schedules import SPEC, Checkpointed, M, interleaved_step


def bytes_to(events) -> dict[int, int]:
    """Bytes this rank sent each peer, from a counter's events."""
    out: dict[int, int] = {}
    for e in events:
        if e.op == "send":
            out[e.peer] = out.get(e.peer, 0) + e.nbytes
    return out


def two_stage(stage, inputs, targets):
    m = len(inputs)
    if dist.get_rank() == 0:
        outs = []
        for x in inputs:
            y = stage(x)
            dist.send(y.detach(), dst=1)
            outs.append(y)
        for y in outs:
            g = torch.empty_like(y)
            dist.recv(g, src=1)
            y.backward(g)
    else:
        got, losses = [], []
        for x, t in zip(inputs, targets):
            a = torch.empty_like(x)
            dist.recv(a, src=0)
            a.requires_grad_()
            losses.append(F.mse_loss(stage(a), t) / m)
            got.append(a)
        for a, loss in zip(got, losses):
            loss.backward()
            dist.send(a.grad, dst=0)


def _counted() -> dict:
    """Every way a tensor leaves a rank, counted; and the functions restored afterwards."""
    rank = dist.get_rank()
    before = (dist.isend, dist.irecv, dist.send, dist.recv)
    t = torch.zeros(10, dtype=torch.float32)
    with traffic.counter().track() as c:
        if rank == 0:
            dist.send(t, dst=1)  # 40 bytes
            dist.isend(torch.zeros(5, dtype=torch.float64), dst=1).wait()  # 40 bytes
            ops = [dist.P2POp(dist.isend, torch.zeros(3), 1)]  # 12 bytes, as torch's schedules send
            for w in dist.batch_isend_irecv(ops):
                w.wait()
        else:
            dist.recv(t, src=0)
            dist.irecv(torch.zeros(5, dtype=torch.float64), src=0).wait()
            ops = [dist.P2POp(dist.irecv, torch.zeros(3), 0)]
            for w in dist.batch_isend_irecv(ops):
                w.wait()
    restored = (dist.isend, dist.irecv, dist.send, dist.recv) == before
    sent = sum(e.nbytes for e in c.events if e.op == "send")
    received = sum(e.nbytes for e in c.events if e.op == "recv")
    return {"sent": sent, "received": received, "to": bytes_to(c.events), "restored": restored}


def _all() -> dict:
    return {
        "hand": runs.measure(two_stage, SPEC, [1, M], warmup=1),
        "repeated": runs.measure(two_stage, SPEC, [M], warmup=0, repeats=2, plain=3),
        "ping": runs.ping_pong(64, rounds=3, warmup=1),
        "ckpt": runs.measure(two_stage, SPEC, [M], warmup=0, wrap=Checkpointed),
        "torch": {
            k: runs.measure(functools.partial(exercises.schedule_step, k), SPEC, [M], warmup=0)
            for k in ("GPipe", "1F1B")
        },
        "interleaved": runs.measure_interleaved(interleaved_step, SPEC, M),
        "counted": _counted(),
        "ddp": runs.ddp_bytes(SPEC),
        # 3 blocks of 591,360 bytes: more than DDP's 1 MiB first bucket once it rebuilds its buckets
        "ddp_rebuilt": runs.ddp_bytes(stages.Spec(depth=3, width=384, batch=8)),
    }


@pytest.fixture(scope="session")
def ranks():
    return launch(_all, 2, timeout=240)
