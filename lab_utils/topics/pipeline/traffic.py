"""Bytes that pipeline stages send each other, counted, and what they cost on a simulated link.

    from lab_utils.topics.pipeline import traffic
    with traffic.P2PCounter() as sent:                # wraps dist.send / isend (and recv / irecv)
        gpipe_step(stage, inputs, targets)            # or a torch.distributed.pipelining schedule
    sent.bytes_to                                     # {peer rank: bytes this rank sent it}
    traffic.send_seconds(sent.messages, LINKS["1GbE"])   # simulated, one message after another

The counter replaces ``isend`` and ``irecv`` in ``torch.distributed`` (``send`` and ``recv`` call
them; ``batch_isend_irecv`` compares against them) for the duration of the block, then restores them, so
hand-written loops and torch's schedules are counted alike without changing either.
"""

from __future__ import annotations

import functools
import os
import sys
from collections import defaultdict
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from lab_utils.simnet import Link, allreduce_seconds, collective_seconds

__all__ = ["Message", "P2PCounter", "send_seconds", "ddp_seconds"]

# ``dist.send`` / ``dist.recv`` call ``isend`` / ``irecv`` and wait: wrapping these two counts all four.
_OPS = ("isend", "irecv")
_DIST_DIR = os.path.dirname(dist.__file__)


@dataclass(frozen=True)
class Message:
    op: str  # "send" or "recv" (isend / irecv count as send / recv)
    peer: int
    nbytes: int
    caller: str = ""  # the file whose code called the send or receive (torch's own schedules included)


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
    torch's schedule's), ``bytes_sent``, ``bytes_received`` and ``bytes_to`` (per destination)."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self._saved: list[tuple[object, str, object]] = []

    def _wrap(self, op: str, fn):
        @functools.wraps(fn)
        def counted(tensor: torch.Tensor, *args, **kwargs):
            kind = "send" if op == "isend" else "recv"
            self.messages.append(
                Message(kind, _peer(op, (tensor, *args), kwargs), tensor.numel() * tensor.element_size(), _caller())
            )
            return fn(tensor, *args, **kwargs)

        return counted

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


def send_seconds(messages: list[Message] | list[dict], link: Link) -> float:
    """Simulated seconds of the sends in ``messages`` on ``link``, one after another (no overlap
    with compute: an upper bound on what the pipeline waits for)."""
    msgs = [m if isinstance(m, Message) else Message(**m) for m in messages]
    return sum(collective_seconds("send", m.nbytes, 2, link) for m in msgs if m.op == "send")


def ddp_seconds(param_bytes: int, world_size: int, link: Link) -> float:
    """Simulated seconds of DDP's gradient all-reduce (one ring over all the parameters)."""
    return allreduce_seconds(param_bytes, world_size, link)
