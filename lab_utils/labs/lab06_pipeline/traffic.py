"""Bytes that pipeline stages send each other, counted, and what they cost on a modelled link.

    with traffic.counter().track() as sent:           # a CommCounter: dist.send / isend, recv / irecv
        gpipe_step(stage, inputs, targets)            # or a torch.distributed.pipelining schedule
    traffic.pipeline_step_seconds(events, sent.events[0].nbytes, LINKS["1GbE"])   # modelled step
    traffic.ddp_step_seconds(events, bucket_bytes, LINKS["1GbE"], world_size=2)   # DDP, same work

Inside ``watch.naming_stages`` each message is also noted in its stage's status, and a wait that
outlasts the status's ``stall_s`` gives up with ``watch.StageStalled``.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from lab_utils.comm import CommCounter, CommEvent, Waited
from lab_utils.env import dist_info
from lab_utils.labs.lab06_pipeline import timeline, watch
from lab_utils.labs.lab06_pipeline.records import Event
from lab_utils.netmodel import Link, backward_with_comm, evenly_ready

__all__ = ["counter", "pipeline_step_seconds", "ddp_step_seconds"]


def counter(origin: float | None = None) -> CommCounter:
    """A ``CommCounter`` of this rank's messages whose waits report to ``watch``; ``origin`` (e.g.
    a ``timeline.Recorder``'s ``start``) sets the clock of each message's ``start`` and ``end``."""
    c = CommCounter() if origin is None else CommCounter(origin=origin)
    c.on_p2p = lambda event, work: _watched(event, work, c.now)
    return c


def _watched(event: CommEvent, work: Any, now: Callable[[], float]) -> _Watched:
    st = watch.status(dist_info().rank)
    index = st.message(event.op, event.peer) if st is not None else -1  # inside watch.naming_stages
    return _Watched(work, st, index, event, now)


class _Watched(Waited):
    """A ``comm.Waited`` message (``wait()`` stamps its ``end``) that also marks it completed in the
    stage's status and gives up with ``watch.StageStalled`` after the status's ``stall_s`` (when set)."""

    def __init__(self, work: Any, status: Any, index: int, event: CommEvent, now: Callable[[], float]):
        super().__init__(work, event, now)
        self._status, self._index = status, index

    def wait(self, *args: Any, **kwargs: Any) -> Any:
        if args or kwargs or self._status is None or self._status.stall_s is None:
            out = super().wait(*args, **kwargs)
        else:
            try:
                out = super().wait(datetime.timedelta(seconds=self._status.stall_s))
            except RuntimeError:
                raise self._status.stalled(dist_info().world_size) from None
        if self._status is not None:
            self._status.completed(self._index)
        return out


def pipeline_step_seconds(events_per_stage: Sequence[Iterable[Event]], message_bytes: float, link: Link) -> float:
    """Modelled seconds of one pipeline step on ``link``: the recorded work, each message sent
    while the sender computes on (``timeline.replay``)."""
    return timeline.span(timeline.replay(events_per_stage, link=link, message_bytes=message_bytes))


def ddp_step_seconds(
    events_per_stage: Sequence[Iterable[Event]], bucket_bytes: Sequence[float], link: Link, world_size: int
) -> float:
    """Modelled seconds of one DDP step doing the same work: each rank's forward (backward) is
    the stages' recorded ones summed / world_size, and the buckets (in DDP's order) are
    all-reduced as the backward makes them (``netmodel.backward_with_comm``)."""
    evs = [e for ev in events_per_stage for e in ev]
    forward = sum(e.end - e.start for e in evs if e.kind == "F") / world_size
    backward = sum(e.end - e.start for e in evs if e.kind == "B") / world_size
    return forward + backward_with_comm(evenly_ready(bucket_bytes, backward), backward, link, world_size).end_s
