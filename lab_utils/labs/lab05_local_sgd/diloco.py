"""DiLoCo's outer optimizer, studied: outer lr {0.7, 1.0} x Nesterov momentum {0, 0.5, 0.9}, each
from the same synchronously trained start, over 8 paired seeds, on non-IID shards.

    python -m lab_utils.labs.lab05_local_sgd.diloco          # the stored study (minutes), rewrites STORED_FILE
    diloco.load_stored()                                 # a Stored: .config, .results["0.7/0.9"] (a Point)

The paper (Douillard et al., 2023): H = 500, ~128 outer steps, lr 0.7, momentum 0.9; the stored
study keeps the 128 outer steps with H = 32 (this task's shards are 32 batches long).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from lab_utils.flat import mean_over_ranks
from lab_utils.labs.lab05_local_sgd.study import run_seeds

__all__ = [
    "GRID",
    "SEEDS",
    "STORED",
    "STORED_FILE",
    "Point",
    "Config",
    "Stored",
    "train_diloco",
    "grid",
    "load_stored",
    "main",
]

GRID = [(lr, mu) for lr in (0.7, 1.0) for mu in (0.0, 0.5, 0.9)]  # (outer lr, Nesterov momentum)
SEEDS = tuple(range(8))
STORED = dict(H=32, rounds=128, warmup=256)  # the paper's 128 outer steps, after a synchronous start
STORED_FILE = Path(__file__).with_name("diloco_study.json")


@dataclass(frozen=True)
class Point:
    """One (outer lr, momentum) of the grid over seeds: held-out loss per seed after the last step
    and at each evaluation step, rounds (steps that communicated), bytes sent per rank."""

    seeds: list[int]
    final: list[float]
    curve: list[tuple[int, list[float]]]  # (step, held-out loss per seed)
    rounds: int
    bytes: int

    def stored(self) -> dict[str, Any]:
        """The record as the stored file holds it (its seeds are the config's)."""
        return {"final": self.final, "curve": self.curve, "rounds": self.rounds, "bytes": self.bytes}


@dataclass(frozen=True)
class Config:
    """The stored study's settings: H (inner steps per round), outer rounds, synchronous warm-up
    steps, seeds, shard skew, ranks, and the seconds it took to compute."""

    H: int
    rounds: int
    warmup: int
    seeds: list[int]
    skew: float
    world: int
    seconds: float


@dataclass(frozen=True)
class Stored:
    """The stored study: its settings and one :class:`Point` per ``"lr/mu"`` of ``GRID``."""

    config: Config
    results: dict[str, Point]


def train_diloco(
    model: torch.nn.Module,
    opt: Any,
    batches: Any,
    log: Any,
    H: int,
    outer_lr: float,
    outer_momentum: float,
    warmup: int = 0,
) -> None:
    """DiLoCo after ``warmup`` synchronous steps (gradients averaged every step): every H inner
    steps, the anchor takes an outer Nesterov SGD step on ``anchor - mean(local)``."""
    anchor: list[torch.Tensor] = []
    outer = None
    for step, (xb, yb) in enumerate(batches):
        if step == warmup:  # DiLoCo starts from the synchronously trained parameters
            anchor = [p.detach().clone().requires_grad_() for p in model.parameters()]
            outer = torch.optim.SGD(anchor, lr=outer_lr, momentum=outer_momentum, nesterov=outer_momentum > 0)
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        if step < warmup:
            with torch.no_grad():
                mean_over_ranks([p.grad for p in model.parameters()])
        opt.step()
        if step >= warmup and (step + 1 - warmup) % H == 0:
            with torch.no_grad():
                deltas = [a.detach() - p.detach() for p, a in zip(model.parameters(), anchor)]
                mean_over_ranks(deltas)  # the outer gradient: the ranks' mean change
            for a, d in zip(anchor, deltas):
                a.grad = d
            outer.step()
            with torch.no_grad():
                for p, a in zip(model.parameters(), anchor):
                    p.copy_(a)  # every rank restarts from the new anchor
        log(loss)


def grid(
    H: int, rounds: int, warmup: int, seeds: tuple[int, ...] = SEEDS, skew: float = 1.0, evals: int = 8
) -> dict[str, Point]:
    """On each rank: every (outer lr, momentum) of ``GRID`` through ``run_seeds`` (AdamW inside, lr
    1e-3), keyed ``"lr/mu"``: a :class:`Point` (``final`` and ``curve`` per seed, ``rounds``, ``bytes``)."""
    out = {}
    for lr, mu in GRID:
        r = run_seeds(
            train_diloco,
            steps=warmup + rounds * H,
            seeds=seeds,
            H=H,
            outer_lr=lr,
            outer_momentum=mu,
            warmup=warmup,
            skew=skew,
            evals=evals,
            optimizer="adamw",
            lr=1e-3,
        )
        out[f"{lr}/{mu}"] = Point(r.seeds, r.final, r.curve, r.rounds, r.comm["bytes"])
    return out


def load_stored(path: Path = STORED_FILE) -> Stored:
    """The stored study: ``config`` (H, rounds, warmup, seeds, skew, ...) and ``results`` (as ``grid``)."""
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: run `python -m lab_utils.labs.lab05_local_sgd.diloco` to make it")
    stored = json.loads(path.read_text())
    config = Config(**stored["config"])
    results = {
        key: Point(
            seeds=r.get("seeds", config.seeds),
            final=r["final"],
            curve=[(step, losses) for step, losses in r["curve"]],
            rounds=r["rounds"],
            bytes=r["bytes"],
        )
        for key, r in stored["results"].items()
    }
    return Stored(config, results)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Run the stored DiLoCo study on 2 ranks and write it.")
    ap.add_argument("--out", type=Path, default=STORED_FILE)
    a = ap.parse_args(argv)
    from lab_utils.launcher import launch

    ranks = launch(grid, 2, kwargs=dict(**STORED, evals=16), timeout=3600)
    config = dict(**STORED, seeds=list(SEEDS), skew=1.0, world=2, seconds=round(ranks.seconds, 1))
    results = {key: p.stored() for key, p in ranks[0].items()}
    a.out.write_text(json.dumps({"config": config, "results": results}, indent=1) + "\n")
    print(f"wrote {a.out} ({ranks.seconds:.0f} s)")


if __name__ == "__main__":
    main()
