"""Segment schedules for a chain of N blocks, as data: which consecutive blocks run under one checkpoint.

A schedule is a list of ``(start, stop, mode)`` tiling ``0..N`` in order; mode "store" runs as
usual, "full" keeps only the segment's input and runs it again in backward.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["Segment", "MODES", "check_segments", "segments_sqrt", "segments_checkpoint_sequential"]

Segment = tuple[int, int, str]  # (start, stop, mode)
MODES = ("store", "full")


def check_segments(segments: Sequence[Segment], n: int) -> None:
    """Raise ValueError unless ``segments`` tile ``0..n`` in order with known modes."""
    pos = 0
    for s, e, m in segments:
        if s != pos or e <= s or m not in MODES:
            raise ValueError(f"segments must tile 0..{n} in order with mode in {MODES}; bad segment {(s, e, m)}")
        pos = e
    if pos != n:
        raise ValueError(f"segments cover 0..{pos} but the chain has {n} blocks")


def segments_sqrt(n: int) -> list[Segment]:
    """Chen et al. (2016): about sqrt(n) checkpointed segments of about sqrt(n) blocks."""
    k = max(1, math.ceil(math.sqrt(n)))
    return [(s, min(s + k, n), "full") for s in range(0, n, k)]


def segments_checkpoint_sequential(n: int, segments: int) -> list[Segment]:
    """What ``torch.utils.checkpoint.checkpoint_sequential(model, segments, x)`` does: chunks of
    ``n // segments`` blocks, all checkpointed except the last chunk (which also takes the rest)."""
    if not 1 <= segments <= n:
        raise ValueError(f"segments={segments}: need 1 <= segments <= number of blocks ({n})")
    size = n // segments
    out = [(s, s + size, "full") for s in range(0, size * (segments - 1), size)]
    return out + [(size * (segments - 1), n, "store")]
