"""One launch for the lab's instrument tests (each launch costs seconds here): a small model
sharded on 2 real ranks, measured by ``holdings`` and counted by ``CommCounter``.

Sizes by hand: 2 blocks Linear(8, 8) in float64 are 2 x (64 + 8) x 8 = 1152 bytes, 576 per rank."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from lab_utils import CommCounter, data, launch
from lab_utils.flat import flat
from lab_utils.labs.lab07_fsdp import holdings, traffic, workload
from tests.helpers.cells import notebook_functions
from tests.labs.lab07_fsdp.sizes import DEPTH, WIDTH, K


def _shard(model, reshard_after_forward=True):
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for block in model:
        fully_shard(block, mesh=mesh, reshard_after_forward=reshard_after_forward)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward)
    return model


def _sync_last(model, opt, micro):
    for i, (x, y) in enumerate(micro):
        model.set_requires_gradient_sync(i == len(micro) - 1)
        (F.mse_loss(model(x), y) / len(micro)).backward()
    opt.step()


def _all(paper_step) -> dict:
    rank, world = dist.get_rank(), dist.get_world_size()
    x, y = workload.dataset(world * K * 2, WIDTH)
    micro = data.micro_batches(x, y, k=K, rank=rank, world_size=world)
    out = {}
    model = _shard(workload.model(WIDTH, DEPTH))
    opt = torch.optim.AdamW(model.parameters())
    out["before"] = holdings.rank_bytes(model, opt)
    counter = CommCounter()
    metered = holdings.MeteredBatches(micro, model, counter)
    with counter.track():
        _sync_last(model, opt, metered)
    out["held"] = metered.held
    out["after"] = holdings.rank_bytes(model, opt)
    out["events"] = counter.events
    out["per_op"] = traffic.per_op(counter.events)
    kept = _shard(workload.model(WIDTH, DEPTH), reshard_after_forward=False)
    loss = F.mse_loss(kept(x), y)
    out["gathered_after_forward"] = holdings.unsharded_param_bytes(kept)
    out["shards_after_forward"] = holdings.sharded_param_bytes(kept)
    loss.backward()
    out["gathered_after_backward"] = holdings.unsharded_param_bytes(kept)
    out["plain_grads"] = holdings.held_grad_bytes(workload.model(WIDTH, DEPTH))
    paper = workload.model(WIDTH, DEPTH)
    counter = CommCounter()
    with counter.track():
        paper_step(paper, *(t.chunk(world)[rank] for t in (x, y)), lr=1e-2)  # the lab's cell
    out["paper"] = {"params": flat(paper), "per_op": traffic.per_op(counter.events)}
    return out


@pytest.fixture(scope="session")
def runs():
    paper_step = notebook_functions("07_fsdp_accumulation", "paper_step")["paper_step"]
    return launch(_all, 2, args=(paper_step,), timeout=240)
