"""Forward functions of a chain (plain torch), as lab 1's cells write them, for the tests to measure.
The selective one, which needs lab 1's policies, is ``tests/labs/lab01_checkpointing/chains.py``."""

from torch.utils.checkpoint import checkpoint, checkpoint_sequential


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


def forward_sequential(blocks, x, k=2):
    return checkpoint_sequential(blocks, k, x, use_reentrant=False)
