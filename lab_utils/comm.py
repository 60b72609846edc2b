"""Count the collectives a rank makes and the bytes they move, step by step.

    counter = CommCounter()
    counter.attach(ddp)                    # DDP's gradient all-reduces (one per bucket)
    for step in range(steps):
        with counter.track():              # direct torch.distributed calls (parameter averaging)
            train_step()
        counter.mark_step()
    counter.summary()                      # {'collectives': ..., 'bytes': ..., 'per_step': [...]}
    counter.gather()                       # every rank's events (a collective itself)

``attach`` installs a comm hook that records each bucket and then does what DDP's default does;
``track`` wraps the ``torch.distributed`` functions that move tensors, so Accelerate's
``LocalSGD``, FSDP2's ``*_single`` collectives and torch's pipeline schedules (``isend`` /
``irecv``, recorded as ``send`` / ``recv`` with a ``peer``) are counted unchanged. Bytes per
rank: an all-reduce or broadcast its tensor, an all-gather the gathered output, a reduce-scatter
its output chunk (as ``netmodel`` expects). A collective calling another is counted once.
``barriers=True`` counts ``barrier()`` too (0 bytes); ``in_backward`` marks a collective issued
during a backward (for the overlap model); a message's ``end`` is stamped when its ``wait()``
returns (``Waited``), and ``on_p2p(event, work)`` may replace the work it returns.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

from lab_utils.env import dist_info, in_backward

__all__ = ["CommEvent", "CommCounter", "Waited", "TRACKED_OPS"]

# Functions that move tensor data between ranks, and the argument that holds the tensor(s).
TRACKED_OPS = (
    "all_reduce",
    "broadcast",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_single",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "reduce_scatter_single",
    "reduce",
    "all_to_all",
    "all_to_all_single",
    "isend",  # recorded as "send": dist.send calls it, and so do torch's pipeline schedules
    "irecv",  # recorded as "recv"
)
_P2P = {"isend": "send", "irecv": "recv"}
_DIST_DIR = os.path.dirname(dist.__file__)


@dataclass
class CommEvent:
    """One collective or message: what it was, how many bytes of payload, at which step, from where."""

    op: str
    nbytes: int
    step: int = 0
    source: str = "torch.distributed"  # or "ddp-hook"
    numel: int = 0
    dtype: str = ""
    rank: int = 0
    group_size: int = 0  # ranks in the group the collective ran on (0: not known, no process group)
    in_backward: bool = False  # called while autograd ran a backward (a DDP comm hook): it can overlap it
    peer: int = -1  # send / recv: the rank at the other end
    caller: str = ""  # the file whose code made the call (a hand-written loop's, or torch's schedule's)
    start: float = 0.0  # seconds after the counter's origin: when it was called
    end: float | None = None  # send / recv: when its wait() returned (None: not waited on through the counter)

    @property
    def blocked_s(self) -> float:
        """Seconds from posting a message to the end of its wait (0 when it was never waited on)."""
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


class Waited:
    """A message's ``Work`` whose ``wait()`` stamps its event's ``end`` (on the counter's clock,
    ``now``); any other attribute is the work's. ``CommCounter.track`` hands one back for each
    counted ``isend`` / ``irecv``. An ``on_p2p`` hook that does more on a wait (lab 6's
    ``traffic.counter``: a timeout, the stage's status) subclasses it and calls ``super().wait``,
    so the stamp stays here.
    """

    def __init__(self, work: Any, event: CommEvent, now: Callable[[], float]):
        self._work, self._event, self._now = work, event, now

    def wait(self, *args: Any, **kwargs: Any) -> Any:
        out = self._work.wait(*args, **kwargs)
        self._event.end = self._now()
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._work, name)


def _group_size(args: tuple, kwargs: dict) -> int:
    """Ranks in the process group a collective was called with (the default group if none)."""
    if not dist.is_initialized():
        return 0
    group = kwargs.get("group")
    if group is None:
        group = next((a for a in args if isinstance(a, dist.ProcessGroup)), None)
    return dist.get_world_size(group)


def _payload(args: tuple, kwargs: dict) -> tuple[int, int, str]:
    """Bytes, elements and dtype of the tensors a collective sends."""
    tensors: list[torch.Tensor] = []
    # FSDP2 calls reduce_scatter_single(output=..., input=...): the output is the rank's chunk.
    first = args[0] if args else kwargs.get("output", next(iter(kwargs.values()), None))
    for c in [first, *args[1:2]]:
        c = [c] if isinstance(c, torch.Tensor) else c
        if isinstance(c, (list, tuple)) and c and all(isinstance(t, torch.Tensor) for t in c):
            tensors = list(c)
            break
    nbytes = sum(t.numel() * t.element_size() for t in tensors)
    numel = sum(t.numel() for t in tensors)
    return nbytes, numel, (str(tensors[0].dtype).replace("torch.", "") if tensors else "")


@dataclass
class CommCounter:
    """Records collectives on this rank; ``mark_step`` advances the step the next ones belong to."""

    events: list[CommEvent] = field(default_factory=list)
    step: int = 0
    barriers: bool = False  # also count dist.barrier() (0 bytes), off by default
    origin: float = field(default_factory=time.perf_counter)  # the clock of each event's start / end
    on_p2p: Callable[[CommEvent, Any], Any] | None = None  # (event, work) -> the work the caller gets
    _paused: bool = False
    _inside: int = 0  # depth of counted calls in progress: nested ones are not counted again

    # -- DDP gradient buckets -------------------------------------------------------------
    def attach(self, ddp_model: torch.nn.parallel.DistributedDataParallel) -> CommCounter:
        """Register a counting comm hook on a DDP model (call before the first backward)."""
        if not isinstance(ddp_model, torch.nn.parallel.DistributedDataParallel):
            raise TypeError(
                f"attach() needs a DistributedDataParallel model, got "
                f"{type(ddp_model).__name__}; wrap it first: DDP(model)"
            )
        ddp_model.register_comm_hook(self, _counting_allreduce_hook)
        return self

    def _record(
        self, op: str, nbytes: int, numel: int, dtype: str, source: str, group_size: int = 0, **more: Any
    ) -> CommEvent:
        rank = dist_info().rank
        event = CommEvent(op, nbytes, self.step, source, numel, dtype, rank, group_size, in_backward(), **more)
        self.events.append(event)
        return event

    def now(self) -> float:
        """Seconds since ``origin``: the clock of the events' ``start`` and ``end``."""
        return time.perf_counter() - self.origin

    # -- direct torch.distributed calls ---------------------------------------------------
    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Collectives in this block are not counted (bookkeeping traffic of the lab itself)."""
        old, self._paused = self._paused, True
        try:
            yield
        finally:
            self._paused = old

    @contextlib.contextmanager
    def track(self) -> Iterator[CommCounter]:
        """Count every tensor collective called through ``torch.distributed`` in this block."""
        originals: dict[tuple[Any, str], Any] = {}
        for op in TRACKED_OPS + (("barrier",) if self.barriers else ()):
            wrapped: dict[int, Any] = {}  # one wrapper per function: batch_isend_irecv compares identities
            for mod in (dist, dist.distributed_c10d):
                fn = getattr(mod, op, None)
                if fn is None or getattr(fn, "_lab_utils_counted", False):
                    continue
                originals[(mod, op)] = fn
                setattr(mod, op, wrapped.setdefault(id(fn), self._wrap(op, fn)))
        try:
            yield self
        finally:
            for (mod, op), fn in originals.items():
                setattr(mod, op, fn)

    def _wrap(self, op: str, fn):
        @functools.wraps(fn)
        def counted(*args, **kwargs):
            event = None
            if not self._paused and not self._inside:
                p2p = {"peer": _peer(op, args, kwargs)} if op in _P2P else {}
                event = self._record(
                    _P2P.get(op, op),
                    *((0, 0, "") if op == "barrier" else _payload(args, kwargs)),
                    "torch.distributed",
                    _group_size(args, kwargs),
                    caller=_caller(),
                    start=self.now(),
                    **p2p,
                )
            self._inside += 1
            try:
                work = fn(*args, **kwargs)
            finally:
                self._inside -= 1
            if event is None or op not in _P2P or work is None:
                return work
            return self.on_p2p(event, work) if self.on_p2p is not None else Waited(work, event, self.now)

        counted._lab_utils_counted = True  # type: ignore[attr-defined]
        return counted

    # -- bookkeeping ----------------------------------------------------------------------
    def mark_step(self) -> None:
        """Start a new step: later events are counted towards step ``self.step + 1``."""
        self.step += 1

    def summary(self) -> dict[str, Any]:
        """Totals and per-step counts: ``collectives``, ``bytes``, ``by_op``, ``per_step``
        (a list over steps 0..last of ``{'collectives', 'bytes'}``)."""
        events = self.events
        n_steps = max([e.step for e in events] + [self.step - 1, -1]) + 1
        per_step = [{"collectives": 0, "bytes": 0} for _ in range(n_steps)]
        by_op: dict[str, int] = {}
        for e in events:
            per_step[e.step]["collectives"] += 1
            per_step[e.step]["bytes"] += e.nbytes
            by_op[e.op] = by_op.get(e.op, 0) + 1
        return {
            "collectives": len(events),
            "bytes": sum(e.nbytes for e in events),
            "by_op": by_op,
            "per_step": per_step,
        }

    def gather(self) -> list[list[CommEvent]]:
        """Every rank's events, indexed by rank (a collective, itself not counted: call it on all ranks)."""
        mine = [asdict(e) for e in self.events]
        if not dist.is_initialized():
            return [[CommEvent(**d) for d in mine]]
        out: list[Any] = [None] * dist_info().world_size
        with self.paused():
            dist.all_gather_object(out, mine)
        return [[CommEvent(**d) for d in per_rank] for per_rank in out]


def _counting_allreduce_hook(counter, bucket):
    """DDP comm hook: record the bucket, then all-reduce and average it as DDP does by default.

    (No annotations: DDP checks them and this module's postponed ones would read as strings.)"""
    counter._record("all_reduce", *_payload((bucket.buffer(),), {}), "ddp-hook", _group_size((), {}))
    with counter.paused():  # the hook's own dist.all_reduce is this same event, not a second one
        return allreduce_hook(None, bucket)
