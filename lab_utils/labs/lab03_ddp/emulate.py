"""An emulated link on real ranks: DDP's buckets wait on a slow "wire" without blocking the backward.

    hook = LinkHook(LINKS["1GbE"]).attach(ddp)     # call on every rank, before the first backward
    loss.backward()                                 # returns once the emulated link has delivered
    hook.steps[-1]                                  # stamps of that backward (seconds from its start)
    hook.close()

The comm hook stamps each bucket's ready time and queues it for this rank's link thread, which
starts the real all-reduce and completes the bucket's future at start + the link's cost
(``netmodel.collective_seconds``), so the wall clock includes the link exactly as
``lab_utils.netmodel`` models it. ``link=None`` forwards each bucket at once: ready times, no delay.

Traps it avoids: ranks agree on a transfer's start through a board in shared memory, not a
collective (on two busy cores a tiny all-reduce took up to 10 ms, slower than the link it
emulates), so the ranks must share one machine; on CUDA every stamp first synchronises (else it
stamps kernel launches), which makes GPU stamps an upper bound.
"""

from __future__ import annotations

import os
import queue
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from lab_utils.env import dist_info
from lab_utils.netmodel import Link, collective_seconds

__all__ = ["MicroStamps", "LinkHook"]


@dataclass
class MicroStamps:
    """One forward + backward on this rank: seconds, buckets as ``(ready_s, nbytes)`` pairs
    (ready_s from the backward's start) and when each transfer left and arrived on the link."""

    forward_s: float = float("nan")
    backward_s: float = float("nan")
    buckets: list[tuple[float, int]] = field(default_factory=list)
    transfers: list[tuple[float, float]] = field(default_factory=list)


class LinkHook:
    """DDP comm-hook state: each bucket queued on an emulated ``link`` (None: no delay)."""

    def __init__(self, link: Link | None = None):
        if link is not None and not isinstance(link, Link):
            raise TypeError(f"link must be a lab_utils.netmodel.Link or None, got {type(link).__name__}")
        self.link = link
        self.steps: list[MicroStamps] = []
        self._world = 1
        self._cuda = False
        self._fwd0 = self._bwd0 = 0.0
        self._queue: queue.Queue[Any] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._board: _Board | None = None
        self._seq = 0

    def attach(self, ddp: DDP) -> LinkHook:
        """Install the comm hook, the stamps and the link thread on ``ddp`` (every rank)."""
        if not isinstance(ddp, DDP):
            raise TypeError(f"attach() needs a DistributedDataParallel model, got {type(ddp).__name__}")
        self._world = dist_info().world_size
        device = next(ddp.parameters()).device
        self._cuda = device.type == "cuda"
        self._board = _Board(device)
        ddp.register_forward_pre_hook(lambda *_: self._forward_started())
        ddp.register_forward_hook(lambda _m, _i, out: self._watch(out))
        ddp.register_comm_hook(self, _link_hook)
        self._thread = threading.Thread(target=self._serve, name="emulated-link", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop the link thread (call after the last backward)."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None

    def reset(self) -> None:
        self.steps.clear()

    # -- stamps ----------------------------------------------------------------------------
    def _now(self) -> float:
        """The clock once the device has finished the work queued so far (CUDA runs asynchronously)."""
        if self._cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    def _forward_started(self) -> None:
        self._fwd0 = self._now()
        self.steps.append(MicroStamps())

    def _watch(self, out: Any) -> None:
        if isinstance(out, torch.Tensor) and out.requires_grad:
            out.register_hook(self._backward_started)

    def _backward_started(self, grad: torch.Tensor) -> None:
        self._bwd0 = self._now()
        step = self.steps[-1]
        step.forward_s = self._bwd0 - self._fwd0
        # Runs when autograd has computed every gradient, before DDP waits for its buckets.
        torch.autograd.Variable._execution_engine.queue_callback(self._backward_done)

    def _backward_done(self) -> None:
        self.steps[-1].backward_s = self._now() - self._bwd0

    # -- the link --------------------------------------------------------------------------
    def _enqueue(self, bucket: Any) -> torch.futures.Future:
        now = self._now()
        buf = bucket.buffer()
        nbytes = buf.numel() * buf.element_size()
        step = self.steps[-1]
        step.buckets.append((now - self._bwd0, nbytes))
        self._seq += 1
        self._board.post(self._seq, now)  # on the backward's own thread: the others see it at once
        fut: torch.futures.Future = torch.futures.Future()
        self._queue.put((self._seq, buf, nbytes, fut, step, self._bwd0))
        return fut

    def _serve(self) -> None:
        free = 0.0  # when the link is next free (perf_counter seconds, as planned)
        while (item := self._queue.get()) is not None:
            seq, buf, nbytes, fut, step, bwd0 = item
            try:
                if self.link is None:
                    start = time.perf_counter()
                    dist.all_reduce(buf)  # loopback: the real collective at once
                else:
                    start = max(self._board.latest(seq), free)  # every rank has it, the link is free
                    work = dist.all_reduce(buf, async_op=True)  # the real collective (gloo or NCCL)
                    free = start + collective_seconds("all_reduce", nbytes, self._world, self.link)
                    time.sleep(max(0.0, free - time.perf_counter()))
                    work.wait()  # the link's time is up; the data is normally there already
                buf.div_(self._world)
                step.transfers.append((start - bwd0, time.perf_counter() - bwd0))
                fut.set_result(buf)
            except Exception as e:  # surface it in the backward that waits for this bucket
                fut.set_exception(e)


class _Board:
    """Each rank's latest bucket-ready times in a file mapped into every rank's memory: slot
    ``seq % SLOTS`` of rank r holds ``(seq, ready time)``. A rank runs at most one backward's
    buckets ahead of the others' link threads (its futures wait for their all-reduces), so
    a slot is read before it is written again."""

    SLOTS = 4096

    def __init__(self, device: torch.device) -> None:
        me = dist_info()
        self.rank, world = me.rank, me.world_size
        path = [None]
        if self.rank == 0:
            fd, path[0] = tempfile.mkstemp(prefix="emulated-link-")
            os.ftruncate(fd, world * self.SLOTS * 2 * 8)
            os.close(fd)
        dist.broadcast_object_list(path, src=0)
        ok = torch.tensor([float(os.path.exists(path[0]))], device=device)  # NCCL reduces on the GPU
        dist.all_reduce(ok, op=dist.ReduceOp.MIN)
        if ok.item() != 1.0:
            raise RuntimeError(
                "LinkHook emulates a link between ranks of ONE machine (they share its clock and "
                f"memory), but a rank could not open {path[0]}: run it with launch() or one torchrun node"
            )
        shared = torch.from_file(path[0], shared=True, size=world * self.SLOTS * 2, dtype=torch.float64)
        self._cells = shared.view(world, self.SLOTS, 2).numpy()
        dist.barrier()  # every rank has mapped it: the name can go, the memory stays until exit
        if self.rank == 0:
            os.unlink(path[0])

    def post(self, seq: int, ready: float) -> None:
        cell = self._cells[self.rank, seq % self.SLOTS]
        cell[1] = ready
        cell[0] = seq  # the tag last: a reader that sees the tag sees the time

    def latest(self, seq: int, poll_s: float = 50e-6) -> float:
        """The latest ready time of bucket ``seq`` over all ranks, once every rank has posted it."""
        slot = self._cells[:, seq % self.SLOTS]
        while (slot[:, 0] != seq).any():
            if (slot[:, 0] > seq).any():
                raise RuntimeError(f"emulated link: a rank overwrote bucket {seq}'s slot before it was read")
            time.sleep(poll_s)
        return float(slot[:, 1].max())


def _link_hook(state: LinkHook, bucket):
    """DDP comm hook: queue the bucket on the emulated link and return its (pending) future.

    (No annotations: DDP checks them and this module's postponed ones would read as strings.)"""
    return state._enqueue(bucket)
