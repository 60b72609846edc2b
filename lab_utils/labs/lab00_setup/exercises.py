"""Graders of lab 0's exercises: the student's rank function on 2, then 3 real processes (gloo,
whatever GPUs the machine has: a student's tensors are CPU tensors), inputs differing per rank,
every rank's result compared with what the collective must give.
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

WORLDS = (2, 3)  # two world sizes: a hard-coded 1/2 or 1/3 fails on one of them


def _values(world: int) -> list[torch.Tensor]:
    """The tensor each rank starts from: distinct per rank, not symmetric around anything."""
    return [torch.tensor([1.0 + 3.0 * r, -2.0 + r * r, 0.5 * (r + 1)]) for r in range(world)]


def _run_mean(fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    me = dist_info()
    out = fn(_values(me.world_size)[me.rank])
    return {"shape": tuple(out.shape)} if isinstance(out, torch.Tensor) and out.dim() != 1 else out


def _run(fn: Callable[..., Any], rank_fn: Callable[..., Any], world: int) -> list[Any]:
    """Every rank of a ``world``-rank gloo group runs ``rank_fn(fn)``: the students' tensors are CPU
    tensors, so gloo even where ``backend="auto"`` would pick NCCL."""
    return list(launch(rank_fn, world, args=(fn,), backend="gloo", timeout=60))


@grader(
    "setup-mean",
    "the mean of a tensor across ranks",
    hint="reread 'Real ranks from a notebook cell': all_reduce sums in place; DDP averages gradients the same way",
    todo="reread 'Real ranks from a notebook cell'",
)
def check_mean(mean_across_ranks: Callable[[torch.Tensor], torch.Tensor]) -> str:
    for world in WORLDS:
        expected = torch.stack(_values(world)).mean(0)
        for rank, out in enumerate(_run(mean_across_ranks, _run_mean, world)):
            if isinstance(out, dict):  # a tensor of another shape than x's
                shape = out["shape"]
                raise AssertionError(f"{world} ranks: rank {rank} returned a tensor of shape {shape}, not (3,) like x")
            assert isinstance(out, torch.Tensor), f"{world} ranks: rank {rank} returned {out!r}, not a tensor"
            assert torch.allclose(out, expected, atol=1e-6), (
                f"{world} ranks: rank {rank} returned {[round(v, 3) for v in out.tolist()]}, "
                f"the mean is {[round(v, 3) for v in expected.tolist()]}"
            )
    return f"every rank holds the mean, on {' and on '.join(map(str, WORLDS))} ranks"


SEED = 123_456_789  # above 2**24: a seed sent through a float32 tensor comes back changed


def _run_broadcast(fn: Callable[[int], int]) -> Any:
    return fn(SEED + 7 * dist_info().rank)


@grader(
    "setup-broadcast",
    "rank 0 decides, every rank follows (broadcast)",
    hint="reread 'Real ranks from a notebook "
    "cell': a collective is called by every rank; dist.broadcast(t, src=0) overwrites t on the others",
    todo="reread 'Real ranks from a notebook cell'",
)
def check_broadcast(agree_on_seed: Callable[[int], int]) -> str:
    for world in WORLDS:
        got = _run(agree_on_seed, _run_broadcast, world)
        assert all(isinstance(g, int) and not isinstance(g, bool) for g in got), (
            f"{world} ranks returned {got!r}: return the seed as an int (a tensor's .item())"
        )
        if any(g != SEED and abs(g - SEED) < 64 for g in got):
            raise AssertionError(
                f"{world} ranks returned {got}: rank 0's seed {SEED} came back changed; "
                "a float32 tensor cannot hold every integer above 2**24 (use an integer tensor)"
            )
        assert got == [SEED] * world, f"{world} ranks returned {got}; each should hold rank 0's seed {SEED}"
    return "every rank uses rank 0's seed, exactly"


def _run_gather(fn: Callable[[dict], list]) -> list:
    return fn({"rank": dist_info().rank, "pid": os.getpid()})


@grader(
    "setup-gather",
    "every rank learns about every other (all_gather_object)",
    hint="reread 'Real ranks from a "
    "notebook cell': dist.all_gather_object fills a list of world_size entries on every rank",
    todo="reread 'Real ranks from a notebook cell'",
)
def check_gather(who_is_there: Callable[[dict], list]) -> str:
    for world in WORLDS:
        for rank, out in enumerate(_run(who_is_there, _run_gather, world)):
            assert isinstance(out, list), f"{world} ranks: rank {rank} returned {type(out).__name__}, not a list"
            ranks = [item.get("rank") if isinstance(item, dict) else item for item in out]
            assert ranks == list(range(world)), f"{world} ranks: rank {rank} sees ranks {ranks}, not 0..{world - 1}"
            pids = {item.get("pid") for item in out if isinstance(item, dict)}
            assert len(pids) == world, f"{world} ranks: rank {rank} sees {len(pids)} distinct processes, not {world}"
    return "each rank sees all ranks, in rank order, in distinct processes, on 2 and on 3 ranks"
