"""The tests' own copies of lab 6's cells that build torch's interleaved schedule and a
checkpointed stage (the lab teaches them; the tests need fixed ones to measure the instruments
against). GPipe and 1F1B come from ``exercises.schedule_step``, the graders' copy of that cell."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.checkpoint import checkpoint

from lab_utils.labs.lab06_pipeline import stages
from lab_utils.labs.lab06_pipeline.records import Event


class Checkpointed(nn.Module):
    """A stage that keeps only its input for backward and recomputes the rest."""

    def __init__(self, stage: nn.Module):
        super().__init__()
        self.stage = stage

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return checkpoint(self.stage, x, use_reentrant=False)


def interleaved_step(parts, inputs, targets):
    """torch's ScheduleInterleaved1F1B over this rank's stages {index: module}."""
    from torch.distributed.pipelining import PipelineStage, ScheduleInterleaved1F1B

    rank, p = dist.get_rank(), dist.get_world_size()
    n = p * len(parts)
    local = []
    for idx, part in parts.items():
        act_in = inputs[0].detach().clone().requires_grad_(idx > 0)
        act_out = inputs[0].detach().clone().requires_grad_()
        local.append(PipelineStage(part, idx, n, inputs[0].device, input_args=act_in, output_args=act_out))
    sched = ScheduleInterleaved1F1B(local, n_microbatches=len(inputs), loss_fn=stages.loss_fn)
    if rank == 0:
        sched.step(torch.cat(inputs))
    elif rank == p - 1:
        sched.step(target=torch.cat(targets), return_outputs=False)  # as the lab's cell 8
    else:
        sched.step()


SPEC = stages.Spec(depth=4, width=16, batch=8, dtype=torch.float64)  # the stages the tests run
M = 4  # micro-batches per step


def ideal_gpipe(p: int, m: int, f: float = 1.0, b: float = 2.0) -> list[list[Event]]:
    """GPipe's ideal timeline with equal stages, built by hand."""
    out = []
    for s in range(p):
        evs = [Event(s, "F", i, (s + i) * f, (s + i + 1) * f) for i in range(m)]
        t_b = (m + p - 1) * f
        evs += [Event(s, "B", i, t_b + (p - 1 - s + i) * b, t_b + (p - s + i) * b) for i in range(m)]
        out.append(evs)
    return out
