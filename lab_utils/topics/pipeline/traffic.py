"""Bytes that pipeline stages send each other, counted, and what they cost on a modelled link.

    from lab_utils.topics.pipeline import traffic
    with traffic.P2PCounter() as sent:                # wraps dist.send / isend (and recv / irecv)
        gpipe_step(stage, inputs, targets)            # or a torch.distributed.pipelining schedule
    sent.bytes_to                                     # {peer rank: bytes this rank sent it}
    traffic.pipeline_step_seconds(events, sent.messages[0].nbytes, LINKS["1GbE"])   # modelled step
    traffic.ddp_step_seconds(events, bucket_bytes, LINKS["1GbE"], world_size=2)   # DDP, same work

The counter replaces ``isend`` and ``irecv`` in ``torch.distributed`` (``send`` and ``recv`` call
them; ``batch_isend_irecv`` compares against them) for the duration of the block, then restores them, so
hand-written loops and torch's schedules are counted alike without changing either.
"""

from __future__ import annotations

import datetime
import functools
import os
import sys
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from lab_utils.overlap import backward_with_comm, evenly_ready
from lab_utils.simnet import Link
from lab_utils.topics.pipeline import timeline, watch

__all__ = ["Message", "P2PCounter", "pipeline_step_seconds", "ddp_step_seconds"]

# ``dist.send`` / ``dist.recv`` call ``isend`` / ``irecv`` and wait: wrapping these two counts all four.
_OPS = ("isend", "irecv")
_DIST_DIR = os.path.dirname(dist.__file__)


@dataclass
class Message:
    op: str  # "send" or "recv" (isend / irecv count as send / recv)
    peer: int
    nbytes: int
    caller: str = ""  # the file whose code called the send or receive (torch's own schedules included)
    start: float = 0.0  # seconds after the counter's origin: when the op was posted
    end: float | None = None  # when its wait() returned (None: nobody waited on it through the counter)

    @property
    def blocked_s(self) -> float:
        """Seconds from posting the op to the end of its wait (0 when it was never waited on)."""
        return 0.0 if self.end is None else self.end - self.start


def _caller() -> str:
    frame = sys._getframe(2)
    # skip torch.distributed's own API layer (distributed_c10d.py, c10d_logger.py), not its subpackages
    while frame is not None and os.path.dirname(frame.f_code.co_filename) == _DIST_DIR:
        frame = frame.f_back
    return frame.f_code.co_filename if frame is not None else ""


def _peer(op: str, args: tuple, kwargs: dict) -> int:
    key = "dst" if op == "isend" else "src"
    for name in (key, f"group_{key}"):
        if kwargs.get(name) is not None:
            return int(kwargs[name])
    return int(args[1]) if len(args) > 1 else -1


class P2PCounter:
    """Context manager recording every point-to-point message of this rank: ``messages`` (each
    with the file whose code called ``dist.send`` / ``isend`` / ...: a hand-written loop's, or
    torch's schedule's), ``bytes_sent``, ``bytes_received`` and ``bytes_to`` (per destination).

    ``origin`` (a ``time.perf_counter()`` value, e.g. a ``timeline.Recorder``'s ``start``) sets the
    clock of each message's ``start`` and ``end``: a blocking ``dist.send`` / ``dist.recv`` is
    blocked from ``start`` to ``end``."""

    def __init__(self, origin: float | None = None) -> None:
        self.messages: list[Message] = []
        self.origin = time.perf_counter() if origin is None else origin
        self._saved: list[tuple[object, str, object]] = []

    def _wrap(self, op: str, fn):
        @functools.wraps(fn)
        def counted(tensor: torch.Tensor, *args, **kwargs):
            kind = "send" if op == "isend" else "recv"
            peer = _peer(op, (tensor, *args), kwargs)
            msg = Message(kind, peer, tensor.numel() * tensor.element_size(), _caller(), self._now())
            self.messages.append(msg)
            st = watch.status(dist.get_rank())
            index = st.message(kind, peer) if st is not None else -1  # inside watch.naming_stages
            work = fn(tensor, *args, **kwargs)
            return _Watched(work, st, index, msg, self._now) if work is not None else None

        return counted

    def _now(self) -> float:
        return time.perf_counter() - self.origin

    def __enter__(self) -> P2PCounter:
        for op in _OPS:
            original = getattr(c10d, op)
            wrapped = self._wrap(op, original)
            for module in (dist, c10d):  # batch_isend_irecv compares ops with c10d's own names
                self._saved.append((module, op, getattr(module, op)))
                setattr(module, op, wrapped)
        return self

    def __exit__(self, *exc) -> None:
        for module, op, original in reversed(self._saved):
            setattr(module, op, original)
        self._saved.clear()

    @property
    def bytes_sent(self) -> int:
        return sum(m.nbytes for m in self.messages if m.op == "send")

    @property
    def bytes_received(self) -> int:
        return sum(m.nbytes for m in self.messages if m.op == "recv")

    @property
    def bytes_to(self) -> dict[int, int]:
        out: dict[int, int] = defaultdict(int)
        for m in self.messages:
            if m.op == "send":
                out[m.peer] += m.nbytes
        return dict(out)


class _Watched:
    """A ``Work`` whose ``wait()`` stamps its message's ``end``, marks it completed in the stage's
    status (inside ``watch.naming_stages``) and gives up with ``watch.StageStalled`` after the
    status's ``stall_s`` (when set)."""

    def __init__(self, work, status, index: int, msg: Message, now):
        self._work, self._status, self._index, self._msg, self._now = work, status, index, msg, now

    def wait(self, *args, **kwargs):
        if args or kwargs or self._status is None or self._status.stall_s is None:
            out = self._work.wait(*args, **kwargs)
        else:
            try:
                out = self._work.wait(datetime.timedelta(seconds=self._status.stall_s))
            except RuntimeError:
                raise self._status.stalled(dist.get_world_size()) from None
        self._msg.end = self._now()
        if self._status is not None:
            self._status.completed(self._index)
        return out

    def __getattr__(self, name):
        return getattr(self._work, name)


def pipeline_step_seconds(events_per_stage: Sequence[Iterable[Any]], message_bytes: float, link: Link) -> float:
    """Modelled seconds of one pipeline step on ``link``: the recorded work of every stage (its
    order and measured durations) with each message (``message_bytes``) sent on the sender's link
    while it goes on computing, and each piece waiting for its message (``timeline.replay``)."""
    return timeline.span(timeline.replay(events_per_stage, link=link, message_bytes=message_bytes))


def ddp_step_seconds(
    events_per_stage: Sequence[Iterable[Any]], bucket_bytes: Sequence[float], link: Link, world_size: int
) -> float:
    """Modelled seconds of one DDP step doing the same work on ``world_size`` ranks: each rank
    runs the whole model on 1/world_size of the batch, so its forward (backward) takes the sum of
    every stage's recorded forwards (backwards) / world_size; the buckets (``bucket_bytes`` in the
    order DDP all-reduced them) become ready as the backward produces their share of the gradient
    bytes and are all-reduced while it goes on (``lab_utils.overlap.backward_with_comm``)."""
    evs = [e for ev in events_per_stage for e in timeline.as_events(ev)]
    forward = sum(e.end - e.start for e in evs if e.kind == "F") / world_size
    backward = sum(e.end - e.start for e in evs if e.kind == "B") / world_size
    return forward + backward_with_comm(evenly_ready(bucket_bytes, backward), backward, link, world_size).end_s
