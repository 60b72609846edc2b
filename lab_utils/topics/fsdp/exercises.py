"""Graders of lab 7's exercises; each runs the student's code on 2 real ranks under FSDP2.

    from lab_utils.topics.fsdp import exercises
    exercises.check_windows(train_windows)          # ○ not attempted / ✓ / ✗ with a hint
    exercises.check_rank_bytes(predict_rank_bytes)
    exercises.check_fewer_gathers(update_fewer_gathers)

Every grader shards its own small model (each block, then the root), computes its own reference
(one process, one large batch per update) and measures the student's code with instruments
attached from outside (counted collectives, the bytes each rank holds).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from lab_utils.checks import grader
from lab_utils.comm import CommCounter
from lab_utils.launch import launch
from lab_utils.topics.fsdp import holdings, traffic, workload

__all__ = ["check_windows", "check_rank_bytes", "check_fewer_gathers", "uneven_model"]

WORLD, WIDTH, DEPTH, K, UPDATES, MB, LR = 2, 16, 2, 3, 2, 2, 1e-2
TOL = 1e-10  # float64: the same sums in another order
BACKEND = "gloo"  # the runs shard over a CPU device mesh, so gloo even where every rank has a GPU


def _sharded(net: nn.Module, reshard_after_forward: bool = True) -> nn.Module:
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for child in net.children():
        if any(True for _ in child.parameters()):
            fully_shard(child, mesh=mesh, reshard_after_forward=reshard_after_forward)
    fully_shard(net, mesh=mesh, reshard_after_forward=reshard_after_forward)
    return net


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    return workload.dataset(UPDATES * WORLD * K * MB, WIDTH)


def _reference() -> torch.Tensor:
    x, y = _data()
    return workload.large_batch_reference(
        list(zip(x.chunk(UPDATES), y.chunk(UPDATES))), width=WIDTH, depth=DEPTH, lr=LR
    )


def _train(update: Callable[..., None], per_update: bool) -> dict[str, Any]:
    """The student's loop on this rank's micro-batches: all K x UPDATES of them in one call
    (``per_update=False``), or one call per update with its K micro-batches."""
    rank, world = dist.get_rank(), dist.get_world_size()
    model = _sharded(workload.model(WIDTH, DEPTH))
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    x, y = _data()
    windows = [
        workload.micro_batches(xs, ys, k=K, rank=rank, world_size=world)
        for xs, ys in zip(x.chunk(UPDATES), y.chunk(UPDATES))
    ]
    counter = CommCounter()
    with counter.track():
        if per_update:
            for micro in windows:
                update(model, opt, micro)
                counter.mark_step()
        else:
            update(model, opt, [mb for w in windows for mb in w], K)
    return {
        "ops": traffic.per_op(counter.events),
        "per_step": counter.summary()["per_step"],
        "left_unsharded": holdings.unsharded_param_bytes(model),
        "params": workload.flat_params(model),
    }


def _gap(got: list[dict[str, Any]]) -> float:
    return (got[0]["params"] - _reference()).abs().max().item()


@grader(
    "Exercise 1 · accumulate over windows under FSDP2",
    hint="reread section 2: gradient sync off for the first k - 1 micro-steps of each window and on for "
    "its last one; each loss divided by k; one optimizer step (and zero_grad) per window",
)
def check_windows(train_windows: Callable[..., None]) -> str:
    got = launch(_train, WORLD, args=(train_windows, False), backend=BACKEND, timeout=180)
    rs = got[0]["ops"].get("reduce_scatter_single", {"count": 0})["count"]
    assert rs == UPDATES * DEPTH, (
        f"{K * UPDATES} micro-steps in windows of k={K}, {DEPTH} sharded blocks: measured {rs} reduce-scatters, "
        f"expected {UPDATES * DEPTH} (one per block per window)"
    )
    gap = _gap(got)
    assert gap <= TOL, f"after {UPDATES} windows the parameters are {gap:.1e} away from {UPDATES} large-batch steps"
    return f"{rs} reduce-scatters for {K * UPDATES} micro-steps, large-batch parameters (max diff {gap:.0e})"


@grader(
    "Exercise 3 · fewer all-gathers while accumulating",
    hint="reread sections 2 and 3: which settings of an FSDP2 module decide when a block's gathered "
    "parameters are freed, and when gradients are synced? Leave the model as you found it",
)
def check_fewer_gathers(update_fewer_gathers: Callable[..., None]) -> str:
    got = launch(_train, WORLD, args=(update_fewer_gathers, True), backend=BACKEND, timeout=180)
    ops = got[0]["ops"]
    param_bytes = sum(p.numel() * p.element_size() for p in workload.model(WIDTH, DEPTH).parameters())
    ag = ops.get("all_gather_single", {"count": 0, "bytes": 0})
    rs = ops.get("reduce_scatter_single", {"count": 0})["count"]
    assert rs == UPDATES * DEPTH, (
        f"measured {rs} reduce-scatters in {UPDATES} updates; expected one per block per update"
    )
    left = [r["left_unsharded"] for r in got]
    assert left == [0] * WORLD, f"after the updates the ranks still hold {left} bytes of gathered parameters"
    assert ag["bytes"] == UPDATES * param_bytes, (
        f"measured {ag['count']} all-gathers ({ag['bytes']:,} bytes) in {UPDATES} updates of {K} micro-steps; "
        f"gathering each block once per update is {UPDATES * param_bytes:,} bytes"
    )
    gap = _gap(got)
    assert gap <= TOL, f"the parameters are {gap:.1e} away from {UPDATES} large-batch steps"
    return (
        f"{ag['count']} all-gathers instead of {2 * K * DEPTH * UPDATES}, large-batch parameters (max diff {gap:.0e})"
    )


def uneven_model() -> nn.Sequential:
    """Exercise 2's model: first dims 5, 3 and 1, none divisible by 2 (float32)."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(7, 5), nn.GELU(), nn.Linear(5, 3), nn.GELU(), nn.Linear(3, 1))


def _measure_uneven() -> dict[str, int]:
    model = _sharded(uneven_model())
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    opt.zero_grad()
    model(torch.randn(4, 7)).pow(2).mean().backward()
    opt.step()
    return holdings.rank_bytes(model, opt)


@grader(
    "Exercise 2 · predict the bytes a rank holds",
    hint="reread section 1 and the prompt: how does torch.chunk cut 5 rows into 2 pieces, or 1 row? "
    "Gradients and AdamW's moments take the shape of the rank's local shard",
)
def check_rank_bytes(predict_rank_bytes: Callable[[nn.Module, int, int], dict[str, int]]) -> str:
    lab = workload.model(128, 4)
    p = sum(t.numel() * t.element_size() for t in lab.parameters())
    for world in (2, 4):
        want = holdings.zero_bytes(p, world_size=world, stage=3)
        got_lab = predict_rank_bytes(lab, world, world - 1)
        assert got_lab == want, (
            f"the lab's model on {world} ranks: predicted {got_lab}, the ZeRO-3 formula gives {want}"
        )
    predicted = [predict_rank_bytes(uneven_model(), WORLD, rank) for rank in range(WORLD)]  # before any launch
    got = launch(_measure_uneven, WORLD, backend=BACKEND, timeout=180)
    for rank, measured in enumerate(got):
        assert predicted[rank] == measured, (
            f"{WORLD} ranks, rank {rank}: predicted {predicted[rank]}, measured {measured}"
        )
    shards = ", ".join(str(g["params"]) for g in got)
    return f"uneven shards on {WORLD} ranks ({shards} parameter bytes) and the lab's model"
