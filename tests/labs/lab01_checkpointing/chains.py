"""Lab 1's selective chain (its policy comes from lab 1's package), for the tests to measure."""

import functools

from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

from lab_utils.labs.lab01_checkpointing.policies import counted, selective_policy


def forward_selective(blocks, x, policy=None):
    contexts = functools.partial(create_selective_checkpoint_contexts, counted(policy or selective_policy()))
    h = x
    for blk in blocks:
        h = checkpoint(blk, h, use_reentrant=False, context_fn=contexts)
    return h
