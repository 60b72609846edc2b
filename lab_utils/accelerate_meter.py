"""Watch an Accelerate loop from outside: what happened on each micro-batch, without editing it (labs 4, 5).

    with accelerate_meter.LoopMeter() as meter:   # any loop that calls prepare() and accumulate()
        out = accelerate_loop(...)
    meter.record["sync"]                      # accelerator.sync_gradients after each micro-batch
    launch(accelerate_meter.metered(accelerate_loop), world_size=2, kwargs=job)   # on each rank
    with accelerate_meter.LoopMeter(direct=True) as meter:   # LocalSGD's averagings and barriers too
        meter.watch(accelerator, prepared)    # objects prepared before the block
        loop(accelerator, *prepared)

Inside the block ``Accelerator.prepare``, ``accumulate``, ``backward`` and ``clip_grad_norm_`` are
wrapped for every Accelerator. Each micro-batch (leaving ``accumulate``) records its sync flag,
collectives, optimizer steps, scheduler position and learning rate, and the data order;
each ``backward`` its collectives and sync flag, each clip the norm it returned.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState, GradientState

from lab_utils.comm import CommCounter

__all__ = ["LoopMeter", "fresh_accelerate", "metered", "metered_each", "reset_accelerate_state"]

_KEYS = (
    "sync",
    "collectives",
    "optimizer_steps",
    "scheduler_steps",
    "lrs_micro",
    "backward_sync",
    "backward_collectives",
    "grad_norms",
)


def reset_accelerate_state() -> None:
    """Forget the Accelerator singletons of this process (what Accelerate's own tests do), so a
    new Accelerator with other settings can be built. The process group, if any, stays."""
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()


@contextlib.contextmanager
def fresh_accelerate() -> Iterator[None]:
    """The block starts with no Accelerator in this process and leaves none behind, even when it
    raises: for code that builds an Accelerator (or a Trainer) with its own settings."""
    reset_accelerate_state()
    try:
        yield
    finally:
        reset_accelerate_state()


class LoopMeter:
    """Context manager recording, per micro-batch, what Accelerate did (see the module docstring);
    ``direct``: count direct ``torch.distributed`` collectives and barriers too."""

    def __init__(self, *, direct: bool = False) -> None:
        self.record: dict[str, Any] = {k: [] for k in _KEYS}
        self.counter = CommCounter(barriers=direct)
        self._direct = direct
        self._stack = contextlib.ExitStack()
        self._opt_steps = 0
        self._scheduler: Any = None
        self._datasets: list[Any] = []
        self._seen = 0  # events counted when the last micro-batch closed
        self._saved: tuple[Any, ...] | None = None

    def watch(self, accelerator: Accelerator, prepared: tuple) -> None:
        """Meter objects ``accelerator.prepare`` returned (done by itself for a prepare in the block)."""
        for obj in prepared:
            if isinstance(obj, torch.nn.parallel.DistributedDataParallel):
                self.counter.attach(obj)
            elif hasattr(obj, "optimizer") and isinstance(obj.optimizer, torch.optim.Optimizer):
                obj.optimizer.register_step_post_hook(self._count_step)
            elif hasattr(obj, "scheduler"):
                self._scheduler = obj.scheduler
            elif getattr(getattr(obj, "dataset", None), "record", False):
                self._datasets.append(obj.dataset)
        self.record["rank"] = accelerator.process_index
        self.record["num_processes"] = accelerator.num_processes
        self.record["device"] = str(accelerator.device)

    def _count_step(self, *_: Any) -> None:
        self._opt_steps += 1

    def _close_micro_batch(self, accelerator: Accelerator) -> None:
        n, rec = len(self.counter.events), self.record
        rec["sync"].append(bool(accelerator.sync_gradients))
        rec["collectives"].append(n - self._seen)
        rec["optimizer_steps"].append(self._opt_steps)
        if self._scheduler is not None:
            rec["scheduler_steps"].append(int(self._scheduler.last_epoch))
            rec["lrs_micro"].append(float(self._scheduler.get_last_lr()[0]))
        self._seen = n
        self.counter.mark_step()

    def _after_backward(self, accelerator: Accelerator, before: int) -> None:
        self.record["backward_sync"].append(bool(accelerator.sync_gradients))
        self.record["backward_collectives"].append(len(self.counter.events) - before)

    def __enter__(self) -> LoopMeter:
        prepare, accumulate, meter = Accelerator.prepare, Accelerator.accumulate, self
        backward, clip = Accelerator.backward, Accelerator.clip_grad_norm_

        def watched_prepare(acc: Accelerator, *args: Any, **kwargs: Any) -> Any:
            out = prepare(acc, *args, **kwargs)
            meter.watch(acc, out if isinstance(out, tuple) else (out,))
            return out

        @contextlib.contextmanager
        def watched_accumulate(acc: Accelerator, *models: Any) -> Iterator[None]:
            with accumulate(acc, *models):
                yield
            meter._close_micro_batch(acc)

        def watched_backward(acc: Accelerator, loss: Any, **kwargs: Any) -> Any:
            before = len(meter.counter.events)
            out = backward(acc, loss, **kwargs)
            meter._after_backward(acc, before)
            return out

        def watched_clip(acc: Accelerator, *args: Any, **kwargs: Any) -> Any:
            norm = clip(acc, *args, **kwargs)
            meter.record["grad_norms"].append(float(norm))
            return norm

        self._saved = (prepare, accumulate, backward, clip)
        Accelerator.prepare, Accelerator.accumulate = watched_prepare, watched_accumulate
        Accelerator.backward, Accelerator.clip_grad_norm_ = watched_backward, watched_clip
        if self._direct:
            self._stack.enter_context(self.counter.track())
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stack.close()
        Accelerator.prepare, Accelerator.accumulate, Accelerator.backward, Accelerator.clip_grad_norm_ = self._saved
        self.record["order"] = [i for ds in self._datasets for i in ds.order]
        self.record["total_optimizer_steps"] = self._opt_steps


@dataclass
class metered:  # noqa: N801 - used like a function: launch(metered(loop), ...)
    """``fn`` run inside a ``LoopMeter``: returns ``fn``'s dict with the meter's record merged in.
    Picklable, so ``lab_utils.launch`` can send it (and a notebook-defined ``fn``) to ranks."""

    fn: Callable[..., dict[str, Any]]

    def __call__(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        with LoopMeter() as meter:
            out = self.fn(*args, **kwargs)
        if not isinstance(out, dict):
            raise TypeError(f"metered({getattr(self.fn, '__name__', self.fn)}) needs a function returning a dict")
        return {**out, **meter.record}


@dataclass
class metered_each:  # noqa: N801 - used like a function: launch(metered_each({...}), ...)
    """Several loops run one after another in the same process, each inside its own ``LoopMeter``
    and with a fresh Accelerator state: ``{name: (fn, extra_kwargs)}`` -> ``{name: fn's record}``.
    The call's own arguments go to every loop, so they train the same job. Picklable for ``launch``."""

    runs: dict[str, tuple[Callable[..., dict[str, Any]], dict[str, Any]]]

    def __call__(self, *args: Any, **kwargs: Any) -> dict[str, dict[str, Any]]:
        out = {}
        for name, (fn, extra) in self.runs.items():
            with fresh_accelerate():
                out[name] = metered(fn)(*args, **{**kwargs, **extra})
        return out
