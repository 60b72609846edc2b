"""Forward functions of a chain, as the lab's cells write them, for the tests to measure."""

import functools

from torch.utils.checkpoint import checkpoint, checkpoint_sequential, create_selective_checkpoint_contexts

from lab_utils.labs.lab01_checkpointing.policies import counted, selective_policy


def forward_plain(blocks, x):
    return blocks(x)


def forward_every_block(blocks, x):
    h = x
    for blk in blocks:
        h = checkpoint(blk, h, use_reentrant=False)
    return h


def forward_segments(blocks, x, segments):
    h = x
    for start, stop, mode in segments:
        part = blocks[start:stop]
        h = part(h) if mode == "store" else checkpoint(part, h, use_reentrant=False)
    return h


def forward_selective(blocks, x, policy=None):
    contexts = functools.partial(create_selective_checkpoint_contexts, counted(policy or selective_policy()))
    h = x
    for blk in blocks:
        h = checkpoint(blk, h, use_reentrant=False, context_fn=contexts)
    return h


def forward_sequential(blocks, x, k=2):
    return checkpoint_sequential(blocks, k, x, use_reentrant=False)
