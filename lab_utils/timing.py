"""Wall-clock timing and throughput, with the warm-up that honest numbers need.

from lab_utils.timing import Timer, time_fn, progress
with Timer() as t:
    train_step()
print(t.seconds)
stats = time_fn(train_step, warmup=1, repeat=5)   # median seconds, min, all samples
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch
from tqdm.auto import tqdm

__all__ = ["Timer", "TimeStats", "time_fn", "throughput", "synchronize", "progress"]


def synchronize() -> None:
    """Wait for queued GPU work, so a timer measures the work and not its launch."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


class Timer:
    """Context manager: ``seconds`` holds the elapsed wall-clock time (GPU synchronised)."""

    def __init__(self) -> None:
        self.seconds = float("nan")

    def __enter__(self) -> Timer:
        synchronize()
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        synchronize()
        self.seconds = time.perf_counter() - self._t0


@dataclass
class TimeStats:
    median: float
    min: float
    samples: list[float] = field(default_factory=list)


def time_fn(fn: Callable[[], object], *, warmup: int = 1, repeat: int = 5) -> TimeStats:
    """Run ``fn`` ``warmup`` times untimed (first calls pay for allocation and dispatch caches),
    then ``repeat`` times timed; return the median, minimum and all samples in seconds."""
    if repeat < 1 or warmup < 0:
        raise ValueError(f"time_fn(warmup={warmup}, repeat={repeat}): need warmup >= 0 and repeat >= 1")
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeat):
        with Timer() as t:
            fn()
        samples.append(t.seconds)
    return TimeStats(statistics.median(samples), min(samples), samples)


def throughput(samples: int, seconds: float) -> float:
    """Samples per second (nan when no time was measured)."""
    return samples / seconds if seconds > 0 else float("nan")


def progress(iterable: Iterable, *, desc: str = "", total: int | None = None, disable: bool = False):
    """A ``tqdm.auto`` progress bar (a widget in JupyterLab, text in a terminal) for loops that
    run more than a couple of seconds; it disappears when the loop ends."""
    return tqdm(iterable, desc=desc, total=total, disable=disable, leave=False)
