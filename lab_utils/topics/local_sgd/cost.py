"""Time of a run on a network we do not have: measured compute plus simulated communication.

    step_s = cost.compute_per_step(runs)                           # measured here
    t = cost.simulated_seconds(runs["H=8"], LINKS["1GbE"], 2, step_s)   # cumulative, per step
    t[-1]                                                          # the whole run

The communication is the collectives the run really made (counted, with their sizes), each
costed by ``lab_utils.simnet`` on the link: a model, so every figure using it says *simulated*.
"""

from __future__ import annotations

from collections.abc import Mapping

from lab_utils.simnet import Link, simulate

__all__ = ["compute_per_step", "simulated_seconds"]


def compute_per_step(runs: Mapping[str, dict]) -> float:
    """Median measured seconds per step over all runs: most steps of a local-SGD run make no
    collective, so the median is the compute of one step, and one number is fairer to every
    method than each run's noisy own."""
    times = sorted(t for r in runs.values() for t in r["step_s"])
    if not times:
        raise ValueError("no run holds step_s: pass the runs that record.gather() returned")
    return times[len(times) // 2]


def simulated_seconds(run: dict, link: Link, world_size: int, step_seconds: float) -> list[float]:
    """Cumulative seconds after each step: ``step_seconds`` of compute plus the simulated time of
    the collectives counted in that step on ``link``; anything counted after the last step (an
    averaging at exit) is added to the end."""
    comm = simulate(run["events"], link, world_size)
    out, t = [], 0.0
    for s in range(run["steps"]):
        t += step_seconds + (comm[s] if s < len(comm) else 0.0)
        out.append(t)
    if out:
        out[-1] += sum(comm[run["steps"] :])
    return out
