"""Segment schedules for a chain of N blocks: which consecutive blocks run under one checkpoint.

    from lab_utils.topics.checkpointing import schedules
    schedules.segments_every_k(8, 3)     # [(0, 3, "full"), (3, 6, "full"), (6, 8, "full")]
    schedules.strategy_segments("sqrt(N)", 16)

A schedule is a list of ``(start, stop, mode)`` segments tiling ``0..N`` in order; ``mode`` is
"store" (run normally, keep what autograd saves), "full" (``checkpoint``: keep only the segment's
input, run it again in backward) or "selective" (checkpoint with a policy choosing what to keep).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = [
    "Segment",
    "MODES",
    "check_segments",
    "segments_none",
    "segments_every_k",
    "segments_every_block",
    "segments_sqrt",
    "segments_checkpoint_sequential",
    "segments_selective",
    "STRATEGIES",
    "strategy_segments",
]

Segment = tuple[int, int, str]  # (start, stop, mode)
MODES = ("store", "full", "selective")


def check_segments(segments: Sequence[Segment], n: int) -> None:
    """Raise ValueError unless ``segments`` tile ``0..n`` in order with known modes."""
    pos = 0
    for s, e, m in segments:
        if s != pos or e <= s or m not in MODES:
            raise ValueError(f"segments must tile 0..{n} in order with mode in {MODES}; bad segment {(s, e, m)}")
        pos = e
    if pos != n:
        raise ValueError(f"segments cover 0..{pos} but the chain has {n} blocks")


def segments_none(n: int) -> list[Segment]:
    """No checkpointing: one stored segment."""
    return [(0, n, "store")]


def segments_every_k(n: int, k: int, mode: str = "full") -> list[Segment]:
    """Checkpoint consecutive segments of ``k`` blocks (the last may be shorter)."""
    if k < 1:
        raise ValueError(f"k={k}: a segment needs at least one block")
    return [(s, min(s + k, n), mode) for s in range(0, n, k)]


def segments_every_block(n: int) -> list[Segment]:
    """Checkpoint each block on its own: keeps every block input, recomputes every block once."""
    return segments_every_k(n, 1)


def segments_sqrt(n: int) -> list[Segment]:
    """Chen et al. (2016): about sqrt(n) checkpointed segments of about sqrt(n) blocks."""
    return segments_every_k(n, max(1, math.ceil(math.sqrt(n))))


def segments_checkpoint_sequential(n: int, segments: int) -> list[Segment]:
    """What ``torch.utils.checkpoint.checkpoint_sequential(model, segments, x)`` does: chunks of
    ``n // segments`` blocks, all checkpointed except the last chunk (which also takes the rest)."""
    if not 1 <= segments <= n:
        raise ValueError(f"segments={segments}: need 1 <= segments <= number of blocks ({n})")
    size = n // segments
    out = [(s, s + size, "full") for s in range(0, size * (segments - 1), size)]
    return out + [(size * (segments - 1), n, "store")]


def segments_selective(n: int) -> list[Segment]:
    """Each block in its own selective region (a policy decides what it keeps)."""
    return segments_every_k(n, 1, mode="selective")


STRATEGIES = ("none", "every block", "every k", "checkpoint_sequential", "sqrt(N)", "selective")


def strategy_segments(name: str, n: int, k: int = 2) -> list[Segment]:
    """Segments of a named strategy in ``STRATEGIES`` (``k``: blocks per segment, or the number
    of segments for "checkpoint_sequential")."""
    table = {
        "none": lambda: segments_none(n),
        "every block": lambda: segments_every_block(n),
        "every k": lambda: segments_every_k(n, k),
        "sqrt(N)": lambda: segments_sqrt(n),
        "checkpoint_sequential": lambda: segments_checkpoint_sequential(n, k),
        "selective": lambda: segments_selective(n),
    }
    if name not in table:
        raise ValueError(f"strategy {name!r} is not one of {STRATEGIES}")
    return table[name]()
