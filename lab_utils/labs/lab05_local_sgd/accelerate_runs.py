"""Run an Accelerate training loop (written in a lab cell) on this rank, its communication counted.

    launch(lambda: run_accelerate(guide_loop, local_sgd_steps=8, accumulation=2), world_size=2)

The Accelerator is built inside the rank with ``cpu=True`` on CPU: otherwise each process trains
alone. ``LoopMeter(direct=True)`` counts DDP's all-reduces, LocalSGD's averaging and its barrier.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from accelerate import Accelerator

from lab_utils.accelerate_meter import LoopMeter
from lab_utils.checks import fingerprint
from lab_utils.comm import CommEvent
from lab_utils.env import dist_info
from lab_utils.labs.lab05_local_sgd import task
from lab_utils.memory import nbytes

__all__ = ["Averaging", "AccelerateRun", "run_accelerate"]


@dataclass(frozen=True)
class Averaging:
    """One LocalSGD averaging: the micro-batch (index) the meter filed it under (one at index
    ``micro_batches`` is the averaging at exit; one placed after the ``accumulate()`` block is
    filed under the next micro-batch), whether it fell on an update boundary (no forward had run
    since the last optimizer update: not inside an accumulation window), and how many optimizer
    updates were done when it ran, and whether an optimizer update came next, before any forward
    (it ran between a window's backward and its ``optimizer.step()``). The last three come from the
    order of events, not the filing."""

    micro_batch: int
    on_update_boundary: bool
    updates: int = 0
    before_an_update: bool = False


@dataclass(frozen=True)
class AccelerateRun:
    """What ``run_accelerate`` counted on one rank: the loop's micro-batches, updates and
    collectives, LocalSGD's averagings and barriers, and fingerprints of the final model."""

    num_processes: int  # the Accelerator's
    distributed_type: str
    micro_batches: int
    updates: int  # optimizer updates
    sync_flags: list[bool]  # per micro-batch: did it end with an optimizer update
    events: list[CommEvent]  # each counted collective (step: the micro-batch index)
    n_param_tensors: int
    param_bytes: int
    barriers: list[int]  # micro-batch of each barrier
    averagings: list[Averaging]
    param_fingerprint: str
    buffer_fingerprint: str  # of the floating-point buffers (BatchNorm's running statistics)
    rank: int


def run_accelerate(
    loop: Callable[..., Any],
    *,
    accumulation: int = 2,
    micro_batches: int = 32,
    batchnorm: bool = False,
    **loop_kwargs: Any,
) -> AccelerateRun:
    """Call ``loop(accelerator, model, optimizer, scheduler, dataloader, **loop_kwargs)`` on this
    rank (or alone, without a process group) and return what was counted (see the module doc)."""
    if accumulation < 1 or micro_batches < 1:
        raise ValueError(f"accumulation={accumulation}, micro_batches={micro_batches}: both must be >= 1")
    world = dist_info().world_size
    accelerator = Accelerator(cpu=not torch.cuda.is_available(), gradient_accumulation_steps=accumulation)
    if accelerator.num_processes != world:
        raise RuntimeError(
            f"Accelerator sees {accelerator.num_processes} process(es) but torch.distributed has {world}: "
            f"create Accelerator(cpu=True) inside the rank function (on CPU), after the process group exists"
        )
    batch = task.TASK["batch"]
    x, y, _, _ = task.make_data(world, per_rank=micro_batches * batch, eval_n=16)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=batch)
    model = task.make_model(batchnorm=batchnorm)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    inner = accelerator.unwrap_model(model)
    with LoopMeter(direct=True) as meter:  # barriers too: LocalSGD waits for everyone before each averaging
        meter.watch(accelerator, (model, optimizer, loader, scheduler))
        # what happened in which order: ("forward" | "update", collectives counted by then)
        order: list[tuple[str, int]] = []
        hooks = [
            inner.register_forward_pre_hook(lambda *_: order.append(("forward", len(meter.counter.events)))),
            optimizer.optimizer.register_step_post_hook(lambda *_: order.append(("update", len(meter.counter.events)))),
        ]
        loop(accelerator, model, optimizer, scheduler, loader, **loop_kwargs)
    for hook in hooks:
        hook.remove()
    events, flags = meter.counter.events, meter.record["sync"]
    n_tensors = len(list(inner.parameters()))
    direct = [i for i, e in enumerate(events) if e.source == "torch.distributed" and e.op != "barrier"]
    # LocalSGD averages with one all_reduce per parameter tensor: each run of n_tensors is one averaging.
    averagings = [_averaging(events[i].step, order, i) for i in direct[::n_tensors]]
    out = AccelerateRun(
        num_processes=accelerator.num_processes,
        distributed_type=str(accelerator.distributed_type),
        micro_batches=len(flags),
        updates=sum(flags),
        sync_flags=flags,
        events=events,
        n_param_tensors=n_tensors,
        param_bytes=nbytes(inner.parameters()),
        barriers=[e.step for e in events if e.op == "barrier"],
        averagings=averagings,
        param_fingerprint=fingerprint(inner.parameters()),
        buffer_fingerprint=fingerprint(b for b in inner.buffers() if b.is_floating_point()),
        rank=accelerator.process_index,
    )
    del model, optimizer, loader, scheduler, inner
    accelerator.free_memory()
    return out


def _averaging(micro_batch: int, order: list[tuple[str, int]], first: int) -> Averaging:
    """The averaging filed under ``micro_batch`` whose first collective is event ``first``, placed in
    ``order`` (forwards and updates, each with the collectives counted by then)."""
    before = [kind for kind, seen in order if seen <= first]
    after = [kind for kind, seen in order if seen > first]
    since_update = before[len(before) - before[::-1].index("update") :] if "update" in before else before
    return Averaging(micro_batch, "forward" not in since_update, before.count("update"), after[:1] == ["update"])
