"""DiLoCo's outer optimizer, studied: outer lr {0.7, 1.0} x Nesterov momentum {0, 0.5, 0.9}, each
from the same synchronously trained start, over 8 paired seeds, on non-IID shards. The study is
stored beside this module (``diloco_study.json``); here are its settings, its records and the loader.

    diloco.load_stored()                  # a Stored: .config, .results["0.7/0.9"] (a Point)
    python -m tools.studies.diloco        # instructors: run the study again (minutes), rewrite the file

The paper (Douillard et al., 2023): H = 500, ~128 outer steps, lr 0.7, momentum 0.9; the stored
study keeps the 128 outer steps with H = 32 (this task's shards are 32 batches long).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "GRID",
    "SEEDS",
    "STORED",
    "STORED_FILE",
    "Point",
    "Config",
    "Stored",
    "load_stored",
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
    steps, seeds, shard skew, ranks, the seconds it took to compute, and when and where it ran."""

    H: int
    rounds: int
    warmup: int
    seeds: list[int]
    skew: float
    world: int
    seconds: float
    when: str
    machine: str


@dataclass(frozen=True)
class Stored:
    """The stored study: its settings and one :class:`Point` per ``"lr/mu"`` of ``GRID``."""

    config: Config
    results: dict[str, Point]


def load_stored(path: Path = STORED_FILE) -> Stored:
    """The stored study: ``config`` (H, rounds, warmup, seeds, skew, ...) and ``results`` (a Point per
    ``"lr/mu"``)."""
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: run `python -m tools.studies.diloco` (repository root) to make it")
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
