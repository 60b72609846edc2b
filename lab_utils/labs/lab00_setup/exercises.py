"""Graders of lab 0's exercises: the student's rank function on 3 real processes (gloo), inputs
differing per rank, every rank's result compared with what the collective must give.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch

from lab_utils.checks import grader
from lab_utils.env import dist_info
from lab_utils.launcher import launch

__all__ = ["check_mean", "check_broadcast", "check_gather"]

WORLD = 3  # three ranks: a hard-coded 1/2 or a two-rank shortcut fails


def _values() -> list[torch.Tensor]:
    """The tensor each rank starts from: distinct per rank, not symmetric around anything."""
    return [torch.tensor([1.0 + 3.0 * r, -2.0 + r * r, 0.5 * (r + 1)]) for r in range(WORLD)]


def _run_mean(fn: Callable[[torch.Tensor], torch.Tensor]) -> list[Any]:
    out = fn(_values()[dist_info().rank])
    return out.tolist() if isinstance(out, torch.Tensor) else out


@grader(
    "setup-mean",
    "the mean of a tensor across ranks",
    hint="reread 'Real ranks from a notebook cell': all_reduce sums in place; DDP averages gradients the same way",
)
def check_mean(mean_across_ranks: Callable[[torch.Tensor], torch.Tensor]) -> str:
    expected = torch.stack(_values()).mean(0)
    got = launch(_run_mean, WORLD, args=(mean_across_ranks,), timeout=60)
    for rank, out in enumerate(got):
        assert isinstance(out, list) and len(out) == 3, f"{WORLD} ranks: rank {rank} returned {out!r}, not a tensor"
        assert torch.allclose(torch.tensor(out), expected, atol=1e-6), (
            f"{WORLD} ranks: rank {rank} returned {[round(v, 3) for v in out]}, "
            f"the mean is {[round(v, 3) for v in expected.tolist()]}"
        )
    return f"every rank holds the mean on {WORLD} ranks"


def _run_broadcast(fn: Callable[[int], int]) -> int:
    return int(fn(1000 + 7 * dist_info().rank))


@grader(
    "setup-broadcast",
    "rank 0 decides, every rank follows (broadcast)",
    hint="reread 'Real ranks from a notebook "
    "cell': a collective is called by every rank; dist.broadcast(t, src=0) overwrites t on the others",
)
def check_broadcast(agree_on_seed: Callable[[int], int]) -> str:
    got = list(launch(_run_broadcast, WORLD, args=(agree_on_seed,), timeout=60))
    assert got == [1000] * WORLD, f"{WORLD} ranks returned {got}; each should hold rank 0's seed 1000"
    return "every rank uses rank 0's seed"


def _run_gather(fn: Callable[[dict], list]) -> list:
    return fn({"rank": dist_info().rank, "pid": os.getpid()})


@grader(
    "setup-gather",
    "every rank learns about every other (all_gather_object)",
    hint="reread 'Real ranks from a "
    "notebook cell': dist.all_gather_object fills a list of world_size entries on every rank",
)
def check_gather(who_is_there: Callable[[dict], list]) -> str:
    got = launch(_run_gather, WORLD, args=(who_is_there,), timeout=60)
    for rank, out in enumerate(got):
        assert isinstance(out, list), f"{WORLD} ranks: rank {rank} returned {type(out).__name__}, not a list"
        ranks = [item.get("rank") if isinstance(item, dict) else item for item in out]
        assert ranks == list(range(WORLD)), f"{WORLD} ranks: rank {rank} sees ranks {ranks}, not 0..{WORLD - 1}"
        pids = {item.get("pid") for item in out if isinstance(item, dict)}
        assert len(pids) == WORLD, f"{WORLD} ranks: rank {rank} sees {len(pids)} distinct processes, not {WORLD}"
    return "each rank sees all ranks, in rank order, in distinct processes"
