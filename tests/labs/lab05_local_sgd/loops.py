"""The Accelerate guide's loop with LocalSGD, as the tests drive it, and a right answer to exercise 2
placed as Hugging Face's examples place it (the solution's, which steps LocalSGD once per update
inside the block, comes from the solutions file)."""

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


def after_the_block_loop(accelerator, model, optimizer, scheduler, dataloader, local_sgd_steps):
    """A right answer to exercise 2, as Hugging Face's examples place it: ``local_sgd.step()`` after
    the ``accumulate()`` block, when it ended with an update (the meter files it under the next
    micro-batch; it runs before that micro-batch's forward)."""
    with LocalSGD(accelerator=accelerator, model=model, local_sgd_steps=local_sgd_steps, enabled=True) as local_sgd:
        for inputs, targets in dataloader:
            with accelerator.accumulate(model):
                loss = F.cross_entropy(model(inputs), targets)
                accelerator.backward(loss)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            if accelerator.sync_gradients:
                local_sgd.step()
