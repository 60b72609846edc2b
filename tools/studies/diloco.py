"""Regenerate lab 5's stored study (``lab_utils.labs.lab05_local_sgd.diloco_study.json``): every
run of ``diloco.RUNS`` from the same synchronously trained start, over ``diloco.SEEDS``, on non-IID
shards of fresh samples, with the settings ``diloco.STORED``, on 2 ranks.

    python -m tools.studies.diloco                 # minutes; rewrites diloco.STORED_FILE
    python -m tools.studies.diloco --out FILE      # somewhere else

The settings, the records (``Point``, ``Config``, ``Stored``) and the loader stay in the lab's
package (``diloco.load_stored``); this module only makes the file, and ``dumps`` is what writes it.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from lab_utils.flat import mean_over_ranks
from lab_utils.labs.lab05_local_sgd.diloco import (
    ALPHA,
    COMPARISONS,
    RUNS,
    SEEDS,
    STORED,
    STORED_FILE,
    TEST,
    Config,
    Point,
    Stored,
    run_settings,
)
from lab_utils.labs.lab05_local_sgd.study import run_seeds

__all__ = ["train_diloco", "grid", "dumps", "main"]


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
    """On each rank: every run of ``RUNS`` through ``run_seeds`` (fresh samples, AdamW inside, lr
    1e-3), keyed by its name: a :class:`Point` (``final`` and ``curve`` per seed, ``rounds``, ``bytes``)."""
    out = {}
    for name in RUNS:
        r = run_seeds(
            train_diloco,
            steps=warmup + rounds * H,
            seeds=seeds,
            skew=skew,
            evals=evals,
            fresh=True,
            optimizer="adamw",
            lr=1e-3,
            **run_settings(name, H, rounds, warmup),
        )
        out[name] = Point(r.seeds, r.final, r.curve, r.rounds, r.comm["bytes"])
    return out


def dumps(study: Stored) -> str:
    """The stored file's text: the config, then each point as ``Point.stored`` gives it."""
    results = {key: p.stored() for key, p in study.results.items()}
    return json.dumps({"config": dataclasses.asdict(study.config), "results": results}, indent=1) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m tools.studies.diloco", description="Run lab 5's stored DiLoCo study on 2 ranks and write it."
    )
    ap.add_argument("--out", type=Path, default=STORED_FILE)
    ap.add_argument("--evals", type=int, default=17, help="held-out evaluations per run (evenly spaced)")
    a = ap.parse_args(argv)
    from lab_utils.launcher import launch

    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    ranks = launch(grid, 2, kwargs=dict(**STORED, evals=a.evals), timeout=3600)
    machine = f"{os.cpu_count()} CPU cores ({platform.processor() or platform.machine()}), gloo, 2 ranks"
    config = Config(**STORED, seeds=list(SEEDS), skew=1.0, fresh=True, world=2, seconds=round(ranks.seconds, 1),
                    when=when, machine=machine, comparisons=list(COMPARISONS), alpha=ALPHA, test=TEST)  # fmt: skip
    a.out.write_text(dumps(Stored(config, ranks[0])))
    print(f"wrote {a.out} ({ranks.seconds:.0f} s)")


if __name__ == "__main__":
    main()
