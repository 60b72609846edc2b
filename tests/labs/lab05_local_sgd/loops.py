"""The Accelerate guide's loop with LocalSGD, as the tests drive it (exercise 2's answer, which
steps LocalSGD once per update instead, comes from the solutions file)."""

from __future__ import annotations

import torch.nn.functional as F
from accelerate.local_sgd import LocalSGD


def guide_loop(accelerator, model, optimizer, scheduler, dataloader, local_sgd_steps):
    """The guide's loop: ``local_sgd.step()`` after every micro-batch, so it counts micro-batches."""
    with LocalSGD(accelerator=accelerator, model=model, local_sgd_steps=local_sgd_steps, enabled=True) as local_sgd:
        for inputs, targets in dataloader:
            with accelerator.accumulate(model):
                loss = F.cross_entropy(model(inputs), targets)
                accelerator.backward(loss)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
                local_sgd.step()
