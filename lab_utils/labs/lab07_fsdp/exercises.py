"""Graders of lab 7's exercises; each runs the student's code on real ranks under FSDP2.

    exercises.check_rank_bytes(predict_rank_bytes)        # ○ not attempted / ✓ / ✗ with a hint
    exercises.check_fewer_gathers(update_fewer_gathers)   # 2 ranks, FSDP2
    exercises.check_hsdp_windows(train_windows)            # 4 ranks, HSDP 2 x 2

The trap they guard: a wrong accumulation is a wrong gradient, which the parameters after AdamW
would show only through its epsilon, so a wrapper records the gradient each optimizer step is given.
Each grader tries cases where the plausible rules differ: fsdp-bytes on 4 ranks with first
dimensions 6, 5 and 1 (on 2 ranks ``torch.chunk`` and ``torch.tensor_split`` cut alike), and
fsdp-gathers and fsdp-hsdp-windows end with a plain step compared with a freshly sharded model's, so a setting
left changed (a block that stays gathered after forward or backward) is seen.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from lab_utils import data
from lab_utils.checks import grader, max_abs_diff
from lab_utils.comm import CommCounter
from lab_utils.env import dist_info
from lab_utils.labs.lab07_fsdp import holdings, traffic, workload
from lab_utils.launcher import launch
from lab_utils.memory import nbytes

__all__ = ["check_rank_bytes", "check_fewer_gathers", "check_hsdp_windows", "uneven_model", "RecordingOptimizer"]

WORLD, WIDTH, DEPTH, K, UPDATES, MB, LR = 2, 16, 2, 3, 2, 2, 1e-2
UNEVEN_WORLD = 4  # fsdp-bytes: first dims 6, 5, 1 over 4 ranks, where torch.chunk and tensor_split differ
HSDP = (2, 2)  # replicas x shards: 4 ranks
TOL = 1e-10  # float64: the same sums in another order
BACKEND = "gloo"  # the runs shard over a CPU device mesh, so gloo even where every rank has a GPU


class RecordingOptimizer:
    """Wraps an optimizer: each ``step()`` first keeps a copy of this rank's local gradient shards
    (``grads``: one list per step, no communication), then steps."""

    def __init__(self, optimizer: torch.optim.Optimizer, model: nn.Module):
        self.optimizer, self.params = optimizer, list(model.parameters())
        self.grads: list[list[torch.Tensor | None]] = []

    def step(self, *args, **kwargs):
        local = [None if p.grad is None else holdings.local(p.grad).detach().clone() for p in self.params]
        self.grads.append(local)
        return self.optimizer.step(*args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self.optimizer, name)


def _sharded(net: nn.Module, mesh_shape: Sequence[int] | None = None) -> nn.Module:
    shape = tuple(mesh_shape or (dist_info().world_size,))
    names = ("replicate", "shard") if len(shape) == 2 else None
    mesh = init_device_mesh("cpu", shape, mesh_dim_names=names)
    for child in net.children():
        if any(True for _ in child.parameters()):
            fully_shard(child, mesh=mesh)
    fully_shard(net, mesh=mesh)
    return net


def _data(world: int) -> tuple[torch.Tensor, torch.Tensor]:
    return workload.dataset(UPDATES * world * K * MB, WIDTH)


def _reference_grads(world: int) -> list[list[torch.Tensor]]:
    """One process, one large batch per update (AdamW between them): each update's gradient, per parameter."""
    net = workload.model(WIDTH, DEPTH)
    opt = torch.optim.AdamW(net.parameters(), lr=LR)
    x, y = _data(world)
    out = []
    for xs, ys in zip(x.chunk(UPDATES), y.chunk(UPDATES)):
        opt.zero_grad()
        F.mse_loss(net(xs), ys).backward()
        out.append([p.grad.detach().clone() for p in net.parameters()])
        opt.step()
    return out


def _plain_step(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, Any]:
    """One plain forward and backward (no optimizer): its collectives, and the gathered parameter
    bytes left after the forward and after the backward. The gradients are dropped after."""
    counter = CommCounter()
    with counter.track():
        loss = F.mse_loss(model(x), y)
        after_forward = holdings.unsharded_param_bytes(model)
        loss.backward()
    after_backward = holdings.unsharded_param_bytes(model)
    model.zero_grad(set_to_none=True)
    return {"ops": traffic.per_op(counter.events), "forward": after_forward, "backward": after_backward}


def _train(update: Callable[..., None], per_update: bool, mesh_shape: Sequence[int] | None = None) -> dict[str, Any]:
    """The student's loop on this rank's micro-batches: all K x UPDATES of them in one call
    (``per_update=False``, with k), or one call per update with its K micro-batches."""
    me = dist_info()
    rank, world = me.rank, me.world_size
    model = _sharded(workload.model(WIDTH, DEPTH), mesh_shape=mesh_shape)
    opt = RecordingOptimizer(torch.optim.AdamW(model.parameters(), lr=LR), model)
    x, y = _data(world)
    windows = [
        data.micro_batches(xs, ys, k=K, rank=rank, world_size=world)
        for xs, ys in zip(x.chunk(UPDATES), y.chunk(UPDATES))
    ]
    rows: list[int] = []  # the rows of each forward the student's code runs
    hook = model.register_forward_pre_hook(lambda _m, args: rows.append(args[0].shape[0]))
    counter = CommCounter()
    with counter.track():
        if per_update:
            for micro in windows:
                update(model, opt, micro)
                counter.mark_step()
        else:
            update(model, opt, [mb for w in windows for mb in w], K)
    hook.remove()
    left = holdings.unsharded_param_bytes(model)
    x0, y0 = windows[0][0]
    fresh = _sharded(workload.model(WIDTH, DEPTH), mesh_shape=mesh_shape)
    shards = mesh_shape[-1] if mesh_shape else world
    return {
        "ops": traffic.per_op(counter.events),
        "forward_rows": rows,
        "left_unsharded": left,
        "grads": opt.grads,
        "shard": rank % shards,
        "shards": shards,
        "plain_after": _plain_step(model, x0, y0),  # the model as the student left it
        "plain_fresh": _plain_step(fresh, x0, y0),  # as it was found
    }


def _describe(plain: dict[str, Any]) -> str:
    ops = ", ".join(f"{v['count']} {op}" for op, v in sorted(plain["ops"].items())) or "no collective"
    left = f"{plain['forward']:,} bytes left gathered after the forward, {plain['backward']:,} after the backward"
    return f"{ops}; {left}"


def _left_as_found(got: list[dict[str, Any]]) -> str | None:
    """None when a plain step after the student's updates gathers, syncs and frees on every rank
    as on a freshly sharded model; else what differs (rank 0's first)."""
    for rank, r in enumerate(got):
        if r["plain_after"] != r["plain_fresh"]:
            return (
                f"after your updates a plain forward and backward on rank {rank} made {_describe(r['plain_after'])}; "
                f"a freshly sharded model makes {_describe(r['plain_fresh'])}: set back what you changed"
            )
    return None


def _grad_gap(got: list[dict[str, Any]], world: int, windows: bool = False) -> str | None:
    """None when every optimizer step saw the large-batch gradient; else what was wrong, with the
    likely cause where the gradient shows one (``windows``: all updates' micro-batches in one call)."""
    ref = _reference_grads(world)
    steps = len(got[0]["grads"])
    if steps != UPDATES:
        return f"the optimizer stepped {steps} times in {UPDATES} updates of {K} micro-batches: step once per update"
    worst, ratio, carried = 0.0, 1.0, 0.0  # carried: the gap to the sum of all updates' gradients so far
    for r in got:
        so_far = [torch.zeros_like(w) for w in ref[0]]
        for mine, want in zip(r["grads"], ref):
            so_far = [s + w for s, w in zip(so_far, want)]
            for g, w, s in zip(mine, want, so_far):
                w_local, s_local = (t.chunk(r["shards"], dim=0)[r["shard"]] for t in (w, s))
                if g is None:
                    return "a parameter had no gradient when the optimizer stepped: zero_grad before step?"
                carried = max(carried, max_abs_diff(g, s_local))
                gap = max_abs_diff(g, w_local)
                if gap > worst:
                    worst, ratio = gap, (g.norm() / w_local.norm()).item()
    if worst <= TOL:
        return None
    why = f"the gradient the optimizer stepped with is {worst:.1e} away from the large batch's"
    if abs(ratio - K) < 1e-6:
        return why + f" ({K} times too large: divide each micro-step's loss by k={K})"
    if windows and abs(ratio - 1 / UPDATES) < 1e-6:
        return why + f" ({ratio:.2f} times it: divide by k, the window's length, not len(micro_batches))"
    if carried <= TOL:
        return why + " (gradients carried over from the previous update? zero them after each step)"
    return why + f" (its norm {ratio:.2f} times the large batch's)"


@grader(
    "fsdp-gathers",
    "fewer all-gathers while accumulating",
    hint="reread sections 2 and 3.\n  Which settings of an FSDP2 module decide when a block's gathered parameters "
    "are freed\n  (after its forward, after its backward), and when gradients are synced? Leave every setting "
    "as you found it",
)
def check_fewer_gathers(update_fewer_gathers: Callable[..., None]) -> str:
    got = launch(_train, WORLD, args=(update_fewer_gathers, True), backend=BACKEND, timeout=180)
    rows = got[0]["forward_rows"]
    assert rows == [MB] * (UPDATES * K), (
        f"{UPDATES} updates of {K} micro-batches of {MB} rows ran forwards of {rows} rows: "
        "one forward and backward per micro-batch"
    )
    ops = got[0]["ops"]
    param_bytes = nbytes(workload.model(WIDTH, DEPTH).parameters())
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
    why = _grad_gap(got, WORLD)
    assert why is None, why
    why = _left_as_found(got)
    assert why is None, why
    return (
        f"{ag['count']} all-gathers instead of {2 * K * DEPTH * UPDATES}, the large-batch gradient at every step, "
        "and the model left as found"
    )


@grader(
    "fsdp-hsdp-windows",
    "HSDP: all-reduce across replica groups once per window",
    hint="reread section 4.\n  Its HSDP run is the same window; here several windows come in a row",
)
def check_hsdp_windows(train_windows: Callable[..., None]) -> str:
    world = HSDP[0] * HSDP[1]
    got = launch(_train, world, args=(train_windows, False, HSDP), backend=BACKEND, timeout=240)
    ops = got[0]["ops"]
    ar = ops.get("all_reduce", {"count": 0})["count"]
    rs = ops.get("reduce_scatter_single", {"count": 0})["count"]
    assert rs == UPDATES * K * DEPTH, (
        f"measured {rs} reduce-scatters for {UPDATES * K} micro-steps of {DEPTH} blocks, expected one per block per "
        "micro-step: set_requires_gradient_sync(False) skips them too, and each rank then holds unsharded gradients"
    )
    assert ar == UPDATES * DEPTH, (
        f"measured {ar} all-reduces across replicas for {UPDATES} windows of {DEPTH} blocks; expected one per block "
        "per window (on its last micro-step)"
    )
    why = _grad_gap(got, world, windows=True)
    assert why is None, why
    why = _left_as_found(got)
    assert why is None, why
    return (
        f"{world} ranks ({HSDP[0]} replicas x {HSDP[1]} shards): {rs} reduce-scatters, {ar} all-reduces, "
        "the large-batch gradient at every window's step, and the model left as found"
    )


def uneven_model() -> nn.Sequential:
    """fsdp-bytes' model: first dims 6, 5 and 1 (float32). On 4 ranks FSDP2 gives them 2+2+2+0,
    2+2+1+0 and 1+0+0+0 rows: ``torch.chunk``'s pieces (2+2+2, 2+2+1 and 1: fewer than 4), then
    empty shards; ``torch.tensor_split`` cuts 2+2+1+1, 2+1+1+1 and 1+0+0+0."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 6), nn.GELU(), nn.Linear(6, 5), nn.GELU(), nn.Linear(5, 1))


def _measure_uneven() -> dict[str, Any]:
    """This rank's logical shard bytes after one AdamW step (``rank_bytes``), and the bytes FSDP2
    allocated for its parameter shards (each padded to rank 0's rows)."""
    model = _sharded(uneven_model())
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    opt.zero_grad()
    model(torch.randn(4, 3)).pow(2).mean().backward()
    opt.step()
    allocated = sum(fp._sharded_param_data.untyped_storage().nbytes() for fp in holdings.fsdp_params(model))
    return {"logical": holdings.rank_bytes(model, opt), "allocated params": allocated}


@grader(
    "fsdp-bytes",
    "predict the bytes a rank holds",
    hint="reread the prompt.\n  How does fully_shard cut rows that do not divide by W?\n"
    "  Compare torch.chunk and torch.tensor_split on 6, 5 and 1 rows for 4 ranks.\n"
    "  Gradients and AdamW's moments take the shape of the rank's local shard",
)
def check_rank_bytes(predict_rank_bytes: Callable[[nn.Module, int, int], dict[str, int]]) -> str:
    lab = workload.model(128, 4)
    p = nbytes(lab.parameters())
    for world in (2, 4):
        want = holdings.zero_bytes(p, world_size=world, stage=3)
        got_lab = predict_rank_bytes(lab, world, world - 1)
        assert got_lab == want, (
            f"the lab's model on {world} ranks: predicted {got_lab}, the ZeRO-3 formula gives {want}"
        )
    world = UNEVEN_WORLD
    predicted = [predict_rank_bytes(uneven_model(), world, rank) for rank in range(world)]  # before any launch
    got = launch(_measure_uneven, world, backend=BACKEND, timeout=180)
    for rank, measured in enumerate(got):
        assert predicted[rank] == measured["logical"], (
            f"first dims 6, 5, 1 on {world} ranks, rank {rank}: predicted {predicted[rank]}, "
            f"measured {measured['logical']}"
        )
    shards = ", ".join(f"{g['logical']['params']}" for g in got)
    allocated = sorted({g["allocated params"] for g in got})
    return (
        f"first dims 6, 5, 1 on {world} ranks: {shards} bytes of parameter shards on ranks 0-{world - 1} "
        f"(FSDP2 allocates {' / '.join(map(str, allocated))} on each, padded to rank 0's rows), and the lab's model"
    )
