"""Small seeded datasets made in memory: the same seed gives the same tensors, run after run.

from lab_utils import data
x, y = data.regression(n=256, dim=16, seed=0)                 # linear target + noise
x, y = data.classification(n=512, dim=16, n_classes=2)       # Gaussian blobs, learnable
ids, mask, labels = data.token_classification(n=256)         # padded token sequences
batch = data.lm_batch(n=8, min_len=4, max_len=32)             # variable-length LM batch
data.count_tokens(batch)                                      # its tokens that carry a loss
mine = data.micro_batches(x, y, k=4, rank=1, world_size=2)     # rank 1's 4 micro-batches of (x, y)
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

__all__ = [
    "regression",
    "classification",
    "token_classification",
    "lm_batch",
    "count_tokens",
    "batches",
    "micro_batches",
]


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def regression(
    n: int = 256,
    dim: int = 16,
    out_dim: int = 1,
    *,
    noise: float = 0.1,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs ``x`` [n, dim] and targets ``x @ W + noise`` [n, out_dim]."""
    g = _gen(seed)
    x = torch.randn(n, dim, generator=g, dtype=torch.float64)
    w = torch.randn(dim, out_dim, generator=g, dtype=torch.float64) / dim**0.5
    y = x @ w + noise * torch.randn(n, out_dim, generator=g, dtype=torch.float64)
    return x.to(dtype), y.to(dtype)


def classification(
    n: int = 512, dim: int = 16, n_classes: int = 2, *, separation: float = 1.5, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gaussian blobs, one per class, ``separation`` apart: a model can learn it, not trivially."""
    g = _gen(seed)
    centers = torch.randn(n_classes, dim, generator=g) * separation / dim**0.5 * 2
    y = torch.randint(0, n_classes, (n,), generator=g)
    x = centers[y] + torch.randn(n, dim, generator=g)
    return x, y


def token_classification(
    n: int = 256, *, vocab_size: int = 128, min_len: int = 6, max_len: int = 24, pad_id: int = 0, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sequence classification with a learnable signal: label 1 iff the sequence holds more
    'high' tokens (ids >= vocab_size/2) than 'low' ones. Returns ``input_ids``, ``attention_mask``
    (both [n, max_len], right-padded with ``pad_id``) and ``labels`` [n]."""
    if not 1 <= min_len <= max_len:
        raise ValueError(f"need 1 <= min_len ({min_len}) <= max_len ({max_len})")
    g = _gen(seed)
    lengths = torch.randint(min_len, max_len + 1, (n,), generator=g)
    ids = torch.randint(1, vocab_size, (n, max_len), generator=g)
    mask = (torch.arange(max_len)[None, :] < lengths[:, None]).long()
    ids = ids * mask + pad_id * (1 - mask)
    high = ((ids >= vocab_size // 2) & mask.bool()).sum(1)
    labels = (2 * high > lengths).long()
    return ids, mask, labels


def lm_batch(
    n: int = 8, *, vocab_size: int = 128, min_len: int = 4, max_len: int = 32, pad_id: int = 0, seed: int = 0
) -> dict[str, torch.Tensor]:
    """A causal-LM batch of variable-length sequences, right-padded: ``input_ids``,
    ``attention_mask`` and ``labels`` (-100 on padding, the ignore index of the HF losses)."""
    ids, mask, _ = token_classification(
        n, vocab_size=vocab_size, min_len=min_len, max_len=max_len, pad_id=pad_id, seed=seed
    )
    labels = ids.masked_fill(mask == 0, -100)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def count_tokens(batch: Mapping) -> int:
    """Tokens that carry a loss in a causal-LM batch: labels shifted by one, ignoring -100
    (what transformers calls ``num_items_in_batch``)."""
    return int((batch["labels"][:, 1:] != -100).sum())


def batches(*tensors: torch.Tensor, batch_size: int, shuffle: bool = False, seed: int = 0, drop_last: bool = False):
    """Yield tuples of aligned slices of ``tensors``: a DataLoader without the processes."""
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size}: must be >= 1")
    n = len(tensors[0])
    if any(len(t) != n for t in tensors):
        raise ValueError("batches(): all tensors need the same first dimension")
    order = torch.randperm(n, generator=_gen(seed)) if shuffle else torch.arange(n)
    for start in range(0, n, batch_size):
        idx = order[start : start + batch_size]
        if drop_last and len(idx) < batch_size:
            return
        yield tuple(t[idx] for t in tensors)


def micro_batches(*tensors: torch.Tensor, k: int, rank: int = 0, world_size: int = 1) -> list[tuple[torch.Tensor, ...]]:
    """This rank's ``k`` micro-batches of one update whose whole batch (over every rank) is
    ``tensors`` (aligned on their first dimension, e.g. ``x, y``): a list of tuples of views.

    The one sharding rule of every lab: the batch is cut, in order, into ``world_size * k`` equal
    micro-batches, dealt round robin: micro-batch ``j`` goes to rank ``j % world_size`` as its
    micro-step ``j // world_size`` (Accelerate's default sharding of a data loader's batches). So
    micro-step ``i`` of all ranks together is one contiguous slice of the batch, and one process
    (``world_size=1``) gets the batch cut into ``k`` in order, as a pipeline cuts it."""
    if k < 1 or world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"k={k}, rank={rank}, world_size={world_size}: need k >= 1 and 0 <= rank < world_size")
    sizes = [len(t) for t in tensors]
    if not sizes or len(set(sizes)) > 1:
        raise ValueError(f"tensors with {sizes} samples: pass aligned inputs and targets (the same first dimension)")
    pieces = world_size * k
    if sizes[0] % pieces:
        raise ValueError(
            f"a batch of {sizes[0]} samples does not cut into world_size * k = {pieces} equal micro-batches"
        )
    cut = [t.chunk(pieces) for t in tensors]
    return [tuple(c[i * world_size + rank] for c in cut) for i in range(k)]
