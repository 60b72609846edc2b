"""Gradient accumulation by hand: the loop, the large-batch step it imitates, its traps, and the
explicit accumulator of TensorFlow (``accum_vars``) and Lingvo (``GradientAggregationOptimizer``).

    from lab_utils.accumulation import train_accumulated, train_large_batch, mse_sum, count_items
    hist = train_accumulated(model, opt, micro_batches, k=4, loss_fn=mse_sum, items=count_items)
    ref = train_large_batch(ref_model, ref_opt, micro_batches, k=4, loss_fn=mse_sum, items=count_items)
    # model and ref_model now hold the same parameters, up to rounding

A loss function here returns the *sum* of the per-item losses of a batch and ``items(batch)``
counts the items (samples, or tokens that carry a label). Keeping the sum and the count apart is
what lets the loop choose how to normalise: the mean of each micro-batch divided by K (the
textbook loop, wrong for token losses of padded sequences) or the sum divided by the number of
items in the whole window (what one large batch computes).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Union

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "Batch",
    "NORMALIZE",
    "LAST_WINDOW",
    "SCHEDULER_PER",
    "History",
    "windows",
    "window_sizes",
    "num_updates",
    "concat_batches",
    "count_items",
    "count_tokens",
    "mse_sum",
    "cross_entropy_sum",
    "lm_token_loss_sum",
    "train_accumulated",
    "train_large_batch",
    "GradientAggregationOptimizer",
]

Batch = Union[tuple, list, Mapping]
LossFn = Callable[[nn.Module, Batch], torch.Tensor]
ItemsFn = Callable[[Batch], int]

NORMALIZE = ("window", "mean-of-means", "none")
"""How each micro-batch's loss is scaled before ``backward()``:
``window``: loss sum / items in the whole window (equals one large batch, always);
``mean-of-means``: (loss sum / items in this micro-batch) / K (the textbook loop; equal only when
every micro-batch holds as many items); ``none``: the micro-batch mean, not divided by K (a bug)."""
LAST_WINDOW = ("real-size", "divide-by-k", "skip")
"""What happens to a last window shorter than K: ``real-size`` divides by the micro-batches it
really holds; ``divide-by-k`` divides by K anyway (that step comes out too small); ``skip`` is
the ``if (i + 1) % k == 0: step()`` loop, which never steps on it and leaves its gradients in
``.grad``, where they leak into the first update of the next epoch. (With ``normalize="window"``
the divisor is the window's item count, so ``real-size`` and ``divide-by-k`` agree.)"""
SCHEDULER_PER = ("update", "micro-batch")


# ----------------------------------------------------------------------------- windows
def windows(micro_batches: Sequence, k: int, *, drop_last: bool = False) -> list[list]:
    """Group micro-batches into accumulation windows of ``k``; the last one may be shorter."""
    if k < 1:
        raise ValueError(f"k={k}: the number of micro-batches per update must be >= 1")
    items = list(micro_batches)
    out = [items[i : i + k] for i in range(0, len(items), k)]
    if drop_last and out and len(out[-1]) < k:
        out.pop()
    return out


def window_sizes(n_micro_batches: int, k: int, *, drop_last: bool = False) -> list[int]:
    """The real number of micro-batches in each window, e.g. ``window_sizes(10, 4) == [4, 4, 2]``:
    the divisors that make the short last window an honest mean."""
    if n_micro_batches < 0:
        raise ValueError(f"n_micro_batches={n_micro_batches}: must be >= 0")
    return [len(w) for w in windows(range(n_micro_batches), k, drop_last=drop_last)]


def num_updates(n_micro_batches: int, k: int, *, epochs: int = 1, drop_last: bool = False) -> int:
    """Optimizer updates in a run: what a scheduler's ``total_steps`` must be (not the number of
    micro-batches). ``ceil(n / k)`` per epoch, or ``n // k`` with ``drop_last``."""
    if k < 1 or epochs < 0:
        raise ValueError(f"num_updates(k={k}, epochs={epochs}): need k >= 1 and epochs >= 0")
    per_epoch = n_micro_batches // k if drop_last else math.ceil(n_micro_batches / k)
    return per_epoch * epochs


def concat_batches(batches: Sequence[Batch]) -> Batch:
    """Concatenate micro-batches (tuples or dicts of tensors) along dim 0 into one large batch."""
    if not batches:
        raise ValueError("concat_batches(): got no batches")
    first = batches[0]
    try:
        if isinstance(first, Mapping):
            return {key: torch.cat([b[key] for b in batches]) for key in first}
        return tuple(torch.cat(parts) for parts in zip(*batches))
    except RuntimeError as err:
        raise ValueError(
            "concat_batches(): micro-batches differ in shape beyond dim 0; pad them "
            "to the same length (e.g. the same max_len for lm_batch)"
        ) from err


# ----------------------------------------------------------------------------- losses and counts
def count_items(batch: Batch) -> int:
    """Number of samples: the first dimension of the first tensor (or of ``input_ids``)."""
    first = batch["input_ids"] if isinstance(batch, Mapping) else batch[0]
    return int(first.shape[0])


def count_tokens(batch: Mapping) -> int:
    """Tokens that carry a loss in a causal-LM batch: labels shifted by one, ignoring -100
    (what transformers calls ``num_items_in_batch``)."""
    return int((batch["labels"][:, 1:] != -100).sum())


def mse_sum(model: nn.Module, batch: Batch) -> torch.Tensor:
    """Sum over samples of each sample's mean squared error; batch = (x, y)."""
    x, y = batch
    return (model(x) - y).pow(2).flatten(1).mean(1).sum()


def cross_entropy_sum(model: nn.Module, batch: Batch) -> torch.Tensor:
    """Sum over samples of the cross-entropy; batch = (x, labels)."""
    x, y = batch
    return F.cross_entropy(model(x), y, reduction="sum")


def lm_token_loss_sum(model: nn.Module, batch: Mapping) -> torch.Tensor:
    """Sum over labelled tokens of the next-token cross-entropy of a causal LM (e.g. GPT-2).

    Computed from the logits in the model's own dtype: transformers' built-in loss casts logits
    to float32, which would spoil a float64 comparison."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    return F.cross_entropy(
        logits[:, :-1].flatten(0, 1), batch["labels"][:, 1:].flatten(), ignore_index=-100, reduction="sum"
    )


# ----------------------------------------------------------------------------- the two loops
@dataclass
class History:
    """What a training loop did: the loss of each update (window sum / window items, so runs
    compare), the learning rate each update used, and micro-batches left without a step."""

    losses: list[float] = field(default_factory=list)
    lrs: list[float] = field(default_factory=list)
    leftover_micro_batches: int = 0

    @property
    def updates(self) -> int:
        return len(self.losses)


def _check_choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{name}={value!r}: choose one of {allowed}")


def train_accumulated(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    micro_batches: Sequence[Batch],
    k: int,
    loss_fn: LossFn,
    *,
    items: ItemsFn = count_items,
    normalize: str = "window",
    last_window: str = "real-size",
    scheduler=None,
    scheduler_per: str = "update",
    epochs: int = 1,
) -> History:
    """Train with gradient accumulation: ``backward()`` on every micro-batch, one optimizer step
    (then ``zero_grad``) per window of ``k`` micro-batches. See ``NORMALIZE``, ``LAST_WINDOW`` and
    ``SCHEDULER_PER`` for the choices; the defaults reproduce :func:`train_large_batch`."""
    _check_choice("normalize", normalize, NORMALIZE)
    _check_choice("last_window", last_window, LAST_WINDOW)
    _check_choice("scheduler_per", scheduler_per, SCHEDULER_PER)
    hist = History()
    optimizer.zero_grad(set_to_none=True)
    for _ in range(epochs):
        for window in windows(micro_batches, k):
            short = len(window) < k
            # the divisor of the textbook loop: K, or the window's real size when asked
            n_mb = len(window) if (short and last_window == "real-size") else k
            window_items = sum(items(mb) for mb in window)  # counted before any forward, as HF does
            total = 0.0
            for mb in window:
                loss_sum = loss_fn(model, mb)
                total += loss_sum.item()
                if normalize == "window":
                    loss = loss_sum / window_items
                elif normalize == "mean-of-means":
                    loss = loss_sum / items(mb) / n_mb
                else:  # "none": the micro-batch mean, K times too much in total
                    loss = loss_sum / items(mb)
                loss.backward()  # adds into .grad: this is the accumulation
                if scheduler is not None and scheduler_per == "micro-batch":
                    scheduler.step()
            if short and last_window == "skip":
                hist.leftover_micro_batches += len(window)  # gradients stay in .grad, unused
                continue
            hist.lrs.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if scheduler is not None and scheduler_per == "update":
                scheduler.step()
            hist.losses.append(total / window_items)
    return hist


def train_large_batch(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    micro_batches: Sequence[Batch],
    k: int,
    loss_fn: LossFn,
    *,
    items: ItemsFn = count_items,
    scheduler=None,
    epochs: int = 1,
) -> History:
    """The reference: each window of ``k`` micro-batches concatenated into one batch, one
    forward/backward of its mean loss, one step (a short last window gives a smaller batch)."""
    hist = History()
    for _ in range(epochs):
        for window in windows(micro_batches, k):
            big = concat_batches(window)
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model, big) / items(big)
            loss.backward()
            hist.lrs.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
            hist.losses.append(loss.item())
    optimizer.zero_grad(set_to_none=True)
    return hist


# ----------------------------------------------------------------------------- explicit accumulator
class GradientAggregationOptimizer:
    """Explicit gradient accumulation, as TensorFlow's ``accum_vars`` recipe and Lingvo's
    ``GradientAggregationOptimizer`` (used by GPipe) do it: one buffer per parameter, each
    micro-batch's gradient divided by ``num_micro_batches`` and added in, and every
    ``num_micro_batches`` calls the buffers are handed to the wrapped optimizer, then zeroed.

        agg = GradientAggregationOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), 4)
        for mb in micro_batches:
            grads = agg.compute_gradients(loss_fn(model, mb) / count_items(mb))  # .grad untouched
            applied = agg.apply_gradients(grads)   # True on every 4th call
        agg.flush()                                # a short last window, scaled by its real size

    PyTorch does not need this (``backward()`` already adds into ``.grad``); it makes visible
    what ``.grad`` accumulation does, and it is the shape of the code in frameworks that return
    gradients instead of accumulating them.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, num_micro_batches: int):
        if num_micro_batches < 1:
            raise ValueError(f"num_micro_batches={num_micro_batches}: must be >= 1")
        self.optimizer = optimizer
        self.num_micro_batches = num_micro_batches
        self.params = [p for group in optimizer.param_groups for p in group["params"] if p.requires_grad]
        self.grad_accum = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]
        self.counter = 0  # micro-batches seen, as Lingvo's _counter
        self.global_step = 0  # updates applied

    def compute_gradients(self, loss: torch.Tensor) -> list[torch.Tensor | None]:
        """Gradients of ``loss`` w.r.t. the parameters, returned (``.grad`` is not touched)."""
        return list(torch.autograd.grad(loss, self.params, allow_unused=True))

    @torch.no_grad()
    def apply_gradients(self, grads: Sequence[torch.Tensor | None]) -> bool:
        """Add ``grads / num_micro_batches`` to the buffers; apply and reset on every
        ``num_micro_batches``-th call. Returns True when an update was applied."""
        if len(grads) != len(self.params):
            raise ValueError(
                f"apply_gradients(): got {len(grads)} gradients for {len(self.params)} "
                "parameters; pass the list compute_gradients() returned"
            )
        for acc, g in zip(self.grad_accum, grads):
            if g is not None:
                acc.add_(g / self.num_micro_batches)
        self.counter += 1
        if self.counter % self.num_micro_batches == 0:
            self._apply_and_reset()
            return True
        return False

    @torch.no_grad()
    def flush(self) -> bool:
        """Apply a partial window (fewer than ``num_micro_batches`` calls since the last update),
        rescaled so it is the mean over the micro-batches it really holds. False if empty."""
        pending = self.counter % self.num_micro_batches
        if pending == 0:
            return False
        for acc in self.grad_accum:
            acc.mul_(self.num_micro_batches / pending)
        self.counter += self.num_micro_batches - pending  # the window is closed
        self._apply_and_reset()
        return True

    def _apply_and_reset(self) -> None:
        for p, acc in zip(self.params, self.grad_accum):
            p.grad = acc.clone()
        self.optimizer.step()
        for p, acc in zip(self.params, self.grad_accum):
            p.grad = None
            acc.zero_()
        self.global_step += 1
