"""One launch for the whole lab's tests (each launch costs seconds here): the three
accumulation loops, the reducer probe, the bucket counts, the stamped timing runs and DDP's
settings, on 2 real ranks.

The loops below are the test's own copies of the lab's cells (the lab teaches them; the tests
need fixed ones to measure the instruments against)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lab_utils import launch
from lab_utils.data import micro_batches
from lab_utils.labs.lab03_ddp import buckets, reducer, settings, stamps, workload
from lab_utils.labs.lab03_ddp.stamps import UpdateStamps
from tests.labs.lab03_ddp.sizes import CAP, EXACT_CAP, SMALL, K


def naive(ddp, opt, micro):
    opt.zero_grad()
    for x, y in micro:
        (F.mse_loss(ddp(x), y) / len(micro)).backward()
    opt.step()


def no_sync(ddp, opt, micro):
    opt.zero_grad()
    for x, y in micro[:-1]:
        with ddp.no_sync():
            (F.mse_loss(ddp(x), y) / len(micro)).backward()
    x, y = micro[-1]
    (F.mse_loss(ddp(x), y) / len(micro)).backward()
    opt.step()


def forward_outside(ddp, opt, micro):
    opt.zero_grad()
    for i, (x, y) in enumerate(micro):
        loss = F.mse_loss(ddp(x), y) / len(micro)
        if i < len(micro) - 1:
            with ddp.no_sync():
                loss.backward()
        else:
            loss.backward()
    opt.step()


LOOPS = {"naive": naive, "no_sync": no_sync, "forward_outside": forward_outside}


def _stamped(k: int) -> list:
    """A naive and a no_sync update of SMALL, stamped (``UpdateStamps``) after one warm-up."""
    ddp = workload.wrap(workload.model(SMALL), CAP)
    opt = torch.optim.SGD(ddp.parameters(), lr=SMALL.lr)
    rec = UpdateStamps().attach(ddp, opt)
    x, y = workload.dataset(2 * k * SMALL.micro_batch, SMALL)
    mbs = micro_batches(x, y, k=k, rank=torch.distributed.get_rank(), world_size=2)
    naive(ddp, opt, mbs)  # the bucket rebuild happens after the first backward
    for loop in (naive, no_sync):
        rec.begin()
        loop(ddp, opt, mbs)
        rec.end()
    del ddp, opt
    return rec.updates


def _all(k: int, updates: int) -> dict:
    return {
        "loops": {name: workload.train(fn, k, updates=updates, setup=SMALL) for name, fn in LOOPS.items()},
        "probe": reducer.probe(setup=SMALL),
        "buckets": buckets.counts(caps=(None, 25, CAP, EXACT_CAP), steps=3, setup=SMALL),
        "sweep": stamps.measure(ks=(1, 3), repeats=2, bucket_cap_mb=CAP, setup=SMALL),
        "settings": settings.measure(setup=SMALL, cap_mb=CAP),
        "stamps": _stamped(k),
    }


@pytest.fixture(scope="session")
def runs():
    return launch(_all, 2, args=(K, 2), timeout=240)
