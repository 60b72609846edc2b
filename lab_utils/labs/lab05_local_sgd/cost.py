"""Time of a run on a network we do not have: measured compute, modelled communication
(the overlap model of :mod:`lab_utils.netmodel`, which every modelled time in the labs uses).

    step_s = cost.compute_per_step(runs)
    t = cost.elapsed_seconds(runs["H=8"], LINKS["1GbE"], 2, step_s)    # cumulative, per step

DDP's all-reduces (``ddp-hook`` or counted ``in_backward``) partly hide behind the backward
(``backward_share`` of the step); everything else (averaging, barriers: 0-byte all-reduces) is
serial. ``link`` may map group sizes to links, so subgroup collectives stay inside a node.
"""

from __future__ import annotations

from collections.abc import Mapping

from lab_utils.comm import CommEvent
from lab_utils.labs.lab05_local_sgd.record import Run
from lab_utils.netmodel import Link, MicroStep, evenly_ready, naive_update_seconds, serial_seconds

Links = Link | Mapping[int, Link]  # one link, or one per group size

__all__ = ["compute_per_step", "step_time", "elapsed_seconds"]


def compute_per_step(runs: Mapping[str, Run]) -> float:
    """Median measured seconds per step over all runs: most local-SGD steps make no collective, so
    this is one step's compute, and one number is fairer to every method than each run's own."""
    times = sorted(t for r in runs.values() for t in r.step_s)
    if not times:
        raise ValueError("no run holds step_s: pass the runs that record.gather() returned")
    return times[len(times) // 2]


def _link(link: Links, group_size: int) -> Link:
    if isinstance(link, Link):
        return link
    if group_size not in link:
        raise ValueError(f"no link for collectives on groups of {group_size} ranks: link has {sorted(link)}")
    return link[group_size]


def _ops(events: list[CommEvent], world_size: int) -> dict[int, list[tuple[str, float]]]:
    """Events grouped by group size, as (op, bytes) pairs; barriers as 0-byte all-reduces."""
    out: dict[int, list[tuple[str, float]]] = {}
    for e in events:
        op = "all_reduce" if e.op == "barrier" else e.op
        out.setdefault(e.group_size or world_size, []).append((op, e.nbytes))
    return out


def step_time(
    events: list[CommEvent], link: Links, world_size: int, compute_s: float, *, backward_share: float = 2 / 3
) -> float:
    """One step's modelled seconds: ``compute_s`` of measured compute, DDP's bucket all-reduces
    overlapped with its backward, every other collective after it, one after another."""
    if not 0 < backward_share <= 1:
        raise ValueError(f"backward_share={backward_share}: the backward's share of a step, in (0, 1]")
    during = [e.source == "ddp-hook" or e.in_backward for e in events]
    hooked = [e for e, d in zip(events, during) if d]
    after = [e for e, d in zip(events, during) if not d]
    backward = backward_share * compute_s
    t = compute_s  # a step without collectives in its backward
    for p, ops in _ops(hooked, world_size).items():  # one update of one micro-step, overlapped (k=1)
        micro = MicroStep(compute_s - backward, backward, evenly_ready([n for _, n in ops], backward))
        t = max(t, naive_update_seconds(micro, 1, _link(link, p), p))
    return t + sum(serial_seconds(ops, _link(link, p), p) for p, ops in _ops(after, world_size).items())


def elapsed_seconds(run: Run, link: Links, world_size: int, step_seconds: float) -> list[float]:
    """Cumulative seconds after each step (see :func:`step_time`); collectives counted after
    the last step (an averaging at exit) are added to the end."""
    by_step: dict[int, list[CommEvent]] = {}
    for e in run.events:
        by_step.setdefault(e.step, []).append(e)
    out, t = [], 0.0
    for s in range(run.steps):
        t += step_time(by_step.get(s, []), link, world_size, step_seconds)
        out.append(t)
    if out:
        late = [e for s, evs in by_step.items() if s >= run.steps for e in evs]
        out[-1] += step_time(late, link, world_size, 0.0, backward_share=1.0) if late else 0.0
    return out
