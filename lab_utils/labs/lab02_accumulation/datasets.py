"""Lab 2's generated data, made so that what the lab teaches shows in a run.

``lm_by_length``: short sequences are random tokens (nothing to learn), long ones count upward
(easy), sorted by length inside each window: under the mean of micro-batch means the few tokens
of a short micro-batch weigh as much as the many of a long one. ``noisy_labels``: a small train
set with flipped labels (a memorising model shows a gap) and a large clean validation set.
"""

from __future__ import annotations

import math

import torch

from lab_utils import data

__all__ = ["lm_by_length", "noisy_labels"]


def _sequence(length: int, short_len: int, vocab_size: int, g: torch.Generator) -> torch.Tensor:
    if length <= short_len:  # random: the loss stays near log(vocab)
        return torch.randint(1, vocab_size, (length,), generator=g)
    start = int(torch.randint(1, vocab_size, (1,), generator=g))  # counting: easy to learn
    return (start - 1 + torch.arange(length)) % (vocab_size - 1) + 1


def lm_by_length(
    n_windows: int,
    k: int,
    per_micro: int,
    *,
    vocab_size: int = 32,
    min_len: int = 2,
    max_len: int = 64,
    short_len: int = 8,
    seed: int = 0,
    sort: bool = True,
) -> list[dict[str, torch.Tensor]]:
    """``n_windows * k`` causal-LM micro-batches of ``per_micro`` sequences, right-padded to
    ``max_len`` (token 0, labels -100), lengths log-uniform in [min_len, max_len], sorted inside
    each window (its first micro-batch the shortest) unless ``sort=False``."""
    if not 2 <= min_len <= max_len or min(n_windows, k, per_micro) < 1 or vocab_size < 3:
        raise ValueError(
            f"lm_by_length(n_windows={n_windows}, k={k}, per_micro={per_micro}, min_len={min_len}, "
            f"max_len={max_len}, vocab_size={vocab_size}): need counts >= 1, 2 <= min_len <= max_len "
            "(a sequence needs two tokens to predict one) and vocab_size >= 3"
        )
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n_windows):
        u = torch.rand(k * per_micro, generator=g)
        lengths = torch.exp(math.log(min_len) + u * (math.log(max_len + 1) - math.log(min_len))).long()
        lengths = lengths.clamp(min_len, max_len)
        lengths = (lengths.sort().values if sort else lengths).tolist()
        for j in range(k):
            ids = torch.zeros(per_micro, max_len, dtype=torch.long)
            for i, length in enumerate(lengths[j * per_micro : (j + 1) * per_micro]):
                ids[i, :length] = _sequence(length, short_len, vocab_size, g)
            mask = (ids != 0).long()
            out.append({"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)})
    return out


def noisy_labels(
    n_train: int = 32, n_val: int = 512, *, noise: float = 0.2, dim: int = 16, seed: int = 0
) -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """Two-class Gaussian blobs (``data.classification``): ``n_train`` training samples with a
    fraction ``noise`` of their labels flipped, and ``n_val`` validation samples left clean."""
    if not 0 <= noise < 0.5 or n_train < 1 or n_val < 1:
        raise ValueError(
            f"noisy_labels(n_train={n_train}, n_val={n_val}, noise={noise}): need counts >= 1 and 0 <= noise < 0.5"
        )
    x, y = data.classification(n=n_train + n_val, dim=dim, n_classes=2, separation=1.0, seed=seed)
    flip = torch.rand(n_train, generator=torch.Generator().manual_seed(seed)) < noise
    y_train = torch.where(flip, 1 - y[:n_train], y[:n_train])
    return (x[:n_train], y_train), (x[n_train:], y[n_train:])
