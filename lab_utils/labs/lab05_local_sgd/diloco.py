"""Lab 5's stored study: how often must non-IID ranks average? Every run starts from the same
synchronously trained model and reads **fresh samples** (no sample twice, so nothing is memorised;
the held-out loss is the averaged model's, on all classes); each rank sees only its own classes
(``skew=1``); AdamW inside, over paired seeds. The runs (``RUNS``) differ only in how they
communicate after the start:

    sync      gradients averaged every step (DDP): the control
    H=8 ...   parameters averaged every H steps (local SGD = DiLoCo with outer lr 1, no momentum)
    never     no averaging until the end: two ranks training alone, averaged once
    DiLoCo    the paper's outer step (lr 0.7, Nesterov 0.9) every H steps

``COMPARISONS`` are declared in the generator, which stores them with ``ALPHA`` and ``TEST`` in the
file's config; their sign tests are Holm-corrected together.

    diloco.load_stored()                  # a Stored: .config, .results["H=32"] (a Point)
    python -m tools.studies.diloco        # instructors: run the study again (minutes), rewrite the file
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "SEEDS",
    "STORED",
    "STORED_FILE",
    "RUNS",
    "COMPARISONS",
    "ALPHA",
    "TEST",
    "run_settings",
    "Point",
    "Config",
    "Stored",
    "load_stored",
]

SEEDS = tuple(range(10))
STORED = dict(H=32, rounds=16, warmup=32)  # after 32 synchronous steps, 16 rounds of 32 local steps
# name -> (H, outer lr, outer momentum); H=None: every step synchronous; H=0: averaged only at the end
RUNS: dict[str, tuple[int | None, float, float]] = {
    "sync": (None, 1.0, 0.0),
    "H=8": (8, 1.0, 0.0),
    "H=32": (32, 1.0, 0.0),
    "H=128": (128, 1.0, 0.0),
    "never": (0, 1.0, 0.0),
    "DiLoCo 0.7/0.9": (32, 0.7, 0.9),
}
# (A, B): "does A end with a lower held-out loss than B?", each a two-sided sign test over the seeds
COMPARISONS = (("H=32", "never"), ("sync", "H=32"), ("H=8", "H=32"), ("DiLoCo 0.7/0.9", "H=32"))
ALPHA = 0.05  # family-wise, over COMPARISONS
TEST = "two-sided sign test over paired seeds, Holm-corrected"
STORED_FILE = Path(__file__).with_name("diloco_study.json")


def run_settings(name: str, H: int, rounds: int, warmup: int) -> dict[str, Any]:
    """``train_diloco``'s keyword arguments for run ``name`` of ``RUNS`` (all of them take
    ``warmup + rounds * H`` steps)."""
    h, lr, mu = RUNS[name]
    local = rounds * H
    if h is None:  # synchronous throughout: the warm-up never ends
        return dict(H=1, outer_lr=lr, outer_momentum=mu, warmup=warmup + local)
    return dict(H=h or local, outer_lr=lr, outer_momentum=mu, warmup=warmup)


@dataclass(frozen=True)
class Point:
    """One run of the study over seeds: held-out loss per seed after the last step and at each
    evaluation step, rounds (steps that communicated), bytes sent per rank."""

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
    """The stored study's settings: H (local steps per round of the H=32 and DiLoCo runs), rounds,
    synchronous warm-up steps, seeds, shard skew, fresh samples, ranks, the seconds it took, when
    and where it ran, and the comparisons, family-wise alpha and test the generator declared."""

    H: int
    rounds: int
    warmup: int
    seeds: list[int]
    skew: float
    fresh: bool
    world: int
    seconds: float
    when: str
    machine: str
    comparisons: list[tuple[str, str]]
    alpha: float
    test: str


@dataclass(frozen=True)
class Stored:
    """The stored study: its settings and one :class:`Point` per run of ``RUNS``."""

    config: Config
    results: dict[str, Point]


def load_stored(path: Path = STORED_FILE) -> Stored:
    """The stored study: ``config`` and ``results`` (a Point per name of ``RUNS``)."""
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: run `python -m tools.studies.diloco` (repository root) to make it")
    stored = json.loads(path.read_text())
    raw = stored["config"]
    config = Config(**{**raw, "comparisons": [tuple(c) for c in raw["comparisons"]]})
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
