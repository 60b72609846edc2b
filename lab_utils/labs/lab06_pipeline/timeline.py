"""When each stage computes which micro-batch, recorded from outside the loop, and the bubble.

    rec = timeline.Recorder(stage, stage_index=rank)  # hooks on the stage module, nothing in the loop
    with rec:
        gpipe_step(stage, inputs, targets)            # any loop or schedule that calls stage(x)
    rec.events          # [records.Event(stage, "F"/"B", micro_batch, start, end, saved_bytes, live_bytes), ...]
    rec.live.peak       # the most bytes the stage held for backward at once (live.py)
    timeline.bubble(all_ranks_events)                 # idle fraction of the p stages, measured
    timeline.formula(p=2, m=4)                        # (p - 1) / (m + p - 1) = 0.2
    timeline.formula_split(p=2, m=4)                  # of it: 4/30 in a receive, 2/30 after the last send
    timeline.replay(all_ranks_events)                 # the same pieces, free messages
    timeline.idle_split(runs_per_stage, repeat=i)     # one recorded step: in a message or not

A forward spans the stage's forward pre-hook to its forward hook; a backward, the arrival of its
output's gradient (a tensor hook) to the last parameter's post-accumulate hook, numbered by its
forward, so any order (GPipe, 1F1B) is recorded as it runs. Times are seconds after ``start``,
which the caller sets right after a barrier, so every rank's clock starts together.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from lab_utils.labs.lab06_pipeline.live import LiveBytes, LiveMeter
from lab_utils.labs.lab06_pipeline.records import Event, Run, StageRuns
from lab_utils.netmodel import Bucket, Link, backward_with_comm

__all__ = [
    "Recorder",
    "span",
    "bubble",
    "replay",
    "median_bubble",
    "median_repeat",
    "formula",
    "formula_split",
    "schedule_split",
    "fill_drain",
    "busy_seconds",
    "order",
    "order_1f1b",
    "Idle",
    "idle_split",
]


class Recorder:
    """Context manager: records every forward and backward of ``stage`` as Events, and in ``live``
    the bytes it holds for backward (``live.peak``: the most at once)."""

    def __init__(self, stage: nn.Module, stage_index: int):
        self.stage, self.index = stage, stage_index
        self.params = [p for p in stage.parameters() if p.requires_grad]
        if not self.params:
            raise ValueError(
                f"stage {stage_index} has no trainable parameters: the recorder needs one to see backwards"
            )
        self._cuda = self.params[0].is_cuda
        self.events: list[Event] = []
        self.start = time.perf_counter()
        self._handles: list = []
        self._n_forward = 0
        self._open: dict | None = None  # the forward running now
        self._pending: list[tuple[int, float]] = []  # backwards started, not yet finished
        self._accumulated = 0
        self.live = LiveBytes()

    def restart(self) -> None:
        """Forget the events and count micro-batches from 0 again; times from now on."""
        self.events, self._n_forward, self._pending, self._accumulated = [], 0, [], 0
        self.live.peak = self.live.now
        self.start = time.perf_counter()

    def _now(self) -> float:
        if self._cuda:  # GPU work is queued: wait for it, so a bar spans the work itself
            torch.cuda.synchronize()
        return time.perf_counter() - self.start

    def _pre(self, module, args) -> None:
        # The data a stage is given without a gradient (the batch, on stage 0) is not an
        # activation of this stage: it lives anyway, and views of it would count the whole batch.
        data = [a for a in args if isinstance(a, torch.Tensor) and not a.requires_grad]
        meter = LiveMeter(self.live, self.params + data)
        meter.__enter__()
        self._open = {"t0": self._now(), "meter": meter, "mb": self._n_forward}
        self._n_forward += 1

    def _post(self, module, args, output) -> None:
        o = self._open
        if o is None:
            return
        self._open = None
        o["meter"].__exit__(None, None, None)
        self.events.append(Event(self.index, "F", o["mb"], o["t0"], self._now(), o["meter"].total_bytes, self.live.now))
        out = output[0] if isinstance(output, (tuple, list)) else output
        if isinstance(out, torch.Tensor) and out.requires_grad:
            mb = o["mb"]
            out.register_hook(lambda grad, mb=mb: self._backward_starts(mb))

    def _backward_starts(self, mb: int) -> None:
        self._pending.append((mb, self._now()))

    def _accumulated_one(self, param) -> None:
        self._accumulated += 1
        if self._accumulated == len(self.params) and self._pending:
            mb, t0 = self._pending.pop(0)
            self.events.append(Event(self.index, "B", mb, t0, self._now(), 0, self.live.now))
            self._accumulated = 0

    def __enter__(self) -> Recorder:
        self._handles.append(self.stage.register_forward_pre_hook(self._pre))
        self._handles.append(self.stage.register_forward_hook(self._post))
        for p in self.params:
            self._handles.append(p.register_post_accumulate_grad_hook(self._accumulated_one))
        self.restart()
        return self

    def __exit__(self, *exc) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()


def span(events_per_stage: Sequence[Iterable[Event]]) -> float:
    """Seconds from the first piece of work on any stage to the end of the last."""
    evs = [e for ev in events_per_stage for e in ev]
    return max(e.end for e in evs) - min(e.start for e in evs)


def busy_seconds(events: Iterable[Event]) -> float:
    """Seconds spent computing (forwards and backwards)."""
    return sum(e.end - e.start for e in events)


def bubble(events_per_stage: Sequence[Iterable[Event]]) -> float:
    """Measured idle fraction of one step: 1 - (time computing, summed over the p stages) /
    (p x the step's duration from the first forward to the last backward on any stage)."""
    stages = [list(ev) for ev in events_per_stage]
    if not stages or not all(stages):
        raise ValueError("bubble: give one non-empty list of events per stage (every rank's recorder)")
    t0 = min(e.start for ev in stages for e in ev)
    t1 = max(e.end for ev in stages for e in ev)
    return 1.0 - sum(busy_seconds(ev) for ev in stages) / (len(stages) * (t1 - t0))


def replay(
    events_per_stage: Sequence[Iterable[Event]],
    *,
    slots: bool = False,
    link: Link | None = None,
    message_bytes: float = 0.0,
) -> list[list[Event]]:
    """The same step with free, instant communication: each stage runs its recorded work, in
    order, for its measured durations, each piece as soon as its input exists. Separates the
    schedule's own bubble (and the stages' imbalance) from the time lost to messages and the OS.

    One list per rank: a rank may run several stages (``ScheduleInterleaved1F1B``), one after
    another on its own clock; a forward of stage s waits for stage s - 1's forward of the same
    micro-batch, a backward for stage s + 1's backward (stages by ``Event.stage``).

    ``slots=True``: 1 per forward and 2 per backward, the bubble of the recorded order alone
    (exactly (p - 1) / (m + p - 1) for GPipe's). ``link``: each activation and gradient message
    (``message_bytes``) is sent asynchronously on the sender's modelled link, queued as
    ``netmodel.backward_with_comm`` queues buckets, and the piece needing it waits for it."""
    ranks = [sorted(ev, key=lambda e: e.start) for ev in events_per_stage]
    n_stages = 1 + max(e.stage for ev in ranks for e in ev)
    done: dict[tuple[int, str, int], float] = {}  # when a piece's output is there for its consumer
    out: list[list[Event]] = [[] for _ in ranks]
    nxt, clock = [0] * len(ranks), [0.0] * len(ranks)
    sent: list[list[Bucket]] = [[] for _ in ranks]  # each rank's messages so far, in order
    while any(nxt[r] < len(ranks[r]) for r in range(len(ranks))):
        progressed = False
        for r, pieces in enumerate(ranks):
            while nxt[r] < len(pieces):
                e = pieces[nxt[r]]
                s = e.stage
                dep = (s - 1, "F", e.micro_batch) if e.kind == "F" else (s + 1, "B", e.micro_batch)
                if 0 <= dep[0] < n_stages and dep not in done:
                    break  # its input is not computed yet
                t0 = max(clock[r], done.get(dep, 0.0))
                t1 = t0 + ((1.0 if e.kind == "F" else 2.0) if slots else e.end - e.start)
                clock[r] = done[(s, e.kind, e.micro_batch)] = t1
                sends = (e.kind == "F" and s < n_stages - 1) or (e.kind == "B" and s > 0)
                if link is not None and sends:
                    sent[r].append(Bucket(t1, message_bytes, "send"))
                    queued = backward_with_comm(sent[r], t1, link, world_size=2)  # one message: peer to peer
                    done[(s, e.kind, e.micro_batch)] = queued.transfers[-1].end_s
                out[r].append(Event(e.stage, e.kind, e.micro_batch, t0, t1, e.saved_bytes))
                nxt[r] += 1
                progressed = True
        if not progressed:
            raise ValueError("replay: the recorded orders wait on each other (a deadlock in the schedule)")
    return out


def median_bubble(results: Sequence[StageRuns], m: int, *, slots: bool = False) -> float:
    """Median over the repeats of ``runs.measure`` results of the bubble at m micro-batches:
    measured, or with ``slots`` that of the order alone (see ``replay``)."""
    n = len(results[0].runs[m].events)
    per_repeat = []
    for i in range(n):
        evs = [r.runs[m].events[i] for r in results]
        per_repeat.append(bubble(replay(evs, slots=True) if slots else evs))
    return sorted(per_repeat)[n // 2] if n % 2 else sum(sorted(per_repeat)[n // 2 - 1 : n // 2 + 1]) / 2


def median_repeat(repeats_per_rank: Sequence[Sequence[Iterable[Event]]]) -> int:
    """Which repeat of a recorded point to show: the index of the one whose measured bubble is the
    median (of an even number, the lower of the two middle ones), so that every number shown for
    the point (bubble, its split, its replay) comes from one and the same step.
    ``repeats_per_rank``: each rank's events per repeat, e.g. ``[r.runs[m].events for r in res]``."""
    n = len(repeats_per_rank[0])
    if n == 0 or any(len(r) != n for r in repeats_per_rank):
        raise ValueError("median_repeat: give every rank's events for the same, non-zero number of repeats")
    by_bubble = sorted(range(n), key=lambda i: bubble([r[i] for r in repeats_per_rank]))
    return by_bubble[(n - 1) // 2]


def formula(p: int, m: int) -> float:
    """GPipe's bubble with equal stages and free communication: (p - 1) / (m + p - 1)."""
    if p < 1 or m < 1:
        raise ValueError(f"formula(p={p}, m={m}): both must be >= 1")
    return (p - 1) / (m + p - 1)


def formula_split(p: int, m: int, t_f: float = 1.0, t_b: float = 2.0) -> Idle:
    """Where the formula's bubble falls in a fill-drain loop of blocking sends and receives (the
    lab's ``two_stage_gpipe``), with p equal stages, forwards of ``t_f``, backwards of ``t_b`` and
    free messages. Stage s waits s t_F in its first receive and (p - 1 - s)(t_F + t_B) in the
    receive of its first gradient ("blocked"), and s t_B after its last send, in nothing, while
    the stages before it finish their backwards ("between": the schedule's tail). As fractions of
    p x the step, (m + p - 1)(t_F + t_B):

        blocked = (p - 1)(2 t_F + t_B) / (2 (m + p - 1)(t_F + t_B)),
        between = (p - 1) t_B / (2 (m + p - 1)(t_F + t_B)),

    e.g. p = 2, m = 4, t_B = 2 t_F: 4/30 = 13.3 % blocked and 2/30 = 6.7 % between, 20 % in all.
    ``schedule_split`` finds the same from any timeline (an ideal one, or ``replay``'s)."""
    if t_f <= 0 or t_b <= 0:
        raise ValueError(f"formula_split(t_f={t_f}, t_b={t_b}): durations must be > 0")
    step = (m + p - 1) * (t_f + t_b)
    return Idle(formula(p, m), (p - 1) * (2 * t_f + t_b) / (2 * step))


def schedule_split(events_per_stage: Sequence[Iterable[Event]]) -> Idle:
    """Where the idle time of a timeline with free messages (``replay``'s, or an ideal one) falls
    when each stage is a loop of blocking sends and receives, one stage per rank: before each of
    its pieces a stage waits for that piece's input, in a receive ("blocked"); after its last
    piece it waits in nothing for the step to end ("between", the schedule's tail). The expected
    counterpart of ``idle_split``; for GPipe's ideal timeline, ``formula_split``."""
    stages = [list(ev) for ev in events_per_stage]
    t0 = min(e.start for ev in stages for e in ev)
    t1 = t0 + span(stages)
    before_last = sum(max(e.end for e in ev) - t0 - busy_seconds(ev) for ev in stages)
    return Idle(bubble(stages), before_last / (len(stages) * (t1 - t0)))


def fill_drain(durations: Sequence[tuple[float, float]], m: int) -> list[list[Event]]:
    """GPipe's timeline, free messages, for stages whose every forward takes ``durations[s][0]``
    and every backward ``durations[s][1]`` (seconds, FLOPs, any unit): each piece as soon as its
    input exists (``replay`` of the fill-drain order). Unequal stages idle more than the formula:
    ``bubble(fill_drain([(1, 1), (1, 2)], 4))`` is 8/28 where the formula gives 6/30."""
    orders = []
    for s, (t_f, t_b) in enumerate(durations):
        pieces = [("F", i, t_f) for i in range(m)] + [("B", i, t_b) for i in range(m)]
        orders.append([Event(s, kind, i, j, j + d) for j, (kind, i, d) in enumerate(pieces)])
    return replay(orders)


def order(events: Iterable[Event]) -> list[str]:
    """One stage's work in the order it ran: ['F0', 'F1', 'B0', 'B1', ...]."""
    return [f"{e.kind}{e.micro_batch}" for e in sorted(events, key=lambda e: e.start)]


def order_1f1b(p: int, stage: int, m: int) -> list[str]:
    """The order 1F1B with a flush (PipeDream-Flush) runs on ``stage`` of p: min(m, p - stage)
    forwards, then one backward and one forward in turn, then the remaining backwards. Stage s
    holds at most min(m, p - s) micro-batches' activations at once."""
    warm = min(m, p - stage)
    out = [f"F{i}" for i in range(warm)]
    for i in range(m):
        out.append(f"B{i}")
        if warm + i < m:
            out.append(f"F{warm + i}")
    return out


@dataclass(frozen=True)
class Idle:
    """Where one step's idle time went, as fractions of p x the step: ``blocked`` inside a send or
    receive (the counter's stamps), ``between`` neither there nor computing (after a stage's last
    piece, the schedule's tail; Python, the hooks and the OS between pieces). ``schedule_split``
    and ``formula_split`` give the same two parts expected from a schedule with free messages."""

    measured: float
    blocked: float

    @property
    def between(self) -> float:
        return self.measured - self.blocked


def _union(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def idle_split(runs_per_stage: Sequence[Run], repeat: int = -1) -> Idle:
    """``Idle`` of one recorded step, ``repeat`` (every rank's ``runs.measure().runs[m]``): its
    bubble, and blocked as the union of each stage's stamped messages of that same step, so that
    blocked + between = measured within the repeat."""
    evs = [r.events[repeat] for r in runs_per_stage]
    t0 = min(e.start for ev in evs for e in ev)
    t1 = t0 + span(evs)
    blocked = 0.0
    for r in runs_per_stage:
        msgs = r.messages_per_repeat[repeat] if r.messages_per_repeat else None
        if msgs is None:
            if repeat not in (-1, len(r.events) - 1):
                raise ValueError(f"idle_split: repeat {repeat} has no stamped messages (only the last repeat's)")
            msgs = r.messages
        spans = [(max(m.start, t0), min(m.end, t1)) for m in msgs if m.end is not None]
        blocked += _union([(a, b) for a, b in spans if b > a])
    return Idle(bubble(evs), blocked / (len(evs) * (t1 - t0)))
