"""The Accelerate loop with LocalSGD that the tests drive: the guide's loop, with its knobs."""

from __future__ import annotations

import torch.nn.functional as F
from accelerate.local_sgd import LocalSGD


def guide_loop(accelerator, model, optimizer, scheduler, dataloader, local_sgd_steps=8, per_update=False, use=True):
    """The guide's loop: ``local_sgd.step()`` after every micro-batch (it counts micro-batches), or
    only after the ones that end an update (``per_update``, exercise 2's answer); ``use=False``
    builds LocalSGD disabled."""
    with LocalSGD(accelerator=accelerator, model=model, local_sgd_steps=local_sgd_steps, enabled=use) as local_sgd:
        for inputs, targets in dataloader:
            with accelerator.accumulate(model):
                loss = F.cross_entropy(model(inputs), targets)
                accelerator.backward(loss)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
                if accelerator.sync_gradients or not per_update:
                    local_sgd.step()
