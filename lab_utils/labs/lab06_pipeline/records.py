"""What lab 6's instruments record, plain data: the events of a stage's forwards and backwards
(``timeline.Recorder``) and what ``runs.measure``, ``measure_interleaved`` and ``ddp_bytes`` return
from each rank. Here, apart from both, so that ``timeline`` (which reads runs) and ``runs`` (which
records with ``timeline``) import this module and not each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from lab_utils.comm import CommEvent

__all__ = ["Event", "Run", "StageRuns", "Interleaved", "DDPBytes"]


@dataclass(frozen=True)
class Event:
    """One forward ("F") or backward ("B") of one micro-batch on one stage; seconds after start."""

    stage: int
    kind: str
    micro_batch: int
    start: float
    end: float
    saved_bytes: int = 0
    live_bytes: int = 0  # bytes the stage held for backward (all micro-batches) when this piece ended


@dataclass(frozen=True)
class Run:
    """One m on one stage (``measure``): each repeat's events (seconds) and live peak (bytes held
    for backward at once), and the last step's messages, flattened gradient and forward calls.
    Per repeat as well: its messages (``messages_per_repeat``, so that the idle time of one step
    splits with that step's own stamps), this rank's seconds from the barrier to the end of its
    step (``step_s``), and the same for the uninstrumented steps, when asked for (``plain_s``)."""

    events: list[list[Event]]
    live_peak: list[int]
    messages: list[CommEvent]  # the last repeat's; start / end on the events' clock
    grads: torch.Tensor
    forward_calls: int
    recomputed: int
    messages_per_repeat: list[list[CommEvent]] = field(default_factory=list)
    step_s: list[float] = field(default_factory=list)
    plain_s: list[float] = field(default_factory=list)  # no recorder, no counter, no hooks


@dataclass(frozen=True)
class StageRuns:
    """What ``measure`` recorded on one rank: its stage's index and number of blocks, a Run per m."""

    stage: int
    blocks: int
    runs: dict[int, Run]


@dataclass(frozen=True)
class Interleaved:
    """The recorded steps of ``measure_interleaved`` on one rank: per repeat, both its stages'
    events (seconds, one clock, by start); the last step's messages; each stage's flattened
    gradient by stage index."""

    events: list[list[Event]]
    messages: list[CommEvent]
    grads: dict[int, torch.Tensor]


@dataclass(frozen=True)
class DDPBytes:
    """What real DDP all-reduced in one backward (its second) on one rank (``ddp_bytes``): bytes in all, each
    bucket's bytes in the order DDP ran them, and the model's parameter bytes."""

    bytes: int
    buckets: list[int]
    param_bytes: int
