"""Losses as sums, and the counts that normalise them: the two halves of every mean.

Keeping them apart lets an accumulation loop choose its divisor: the micro-batch's own count
(then / K), or the whole window's (what one large batch uses).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import nn

from lab_utils.data import count_tokens  # shared with lab 4; the lab names it accumulation.count_tokens
from lab_utils.labs.lab02_accumulation.windowing import Batch

__all__ = ["count_items", "count_tokens", "mse_sum", "lm_token_loss_sum"]


def count_items(batch: Batch) -> int:
    """Number of samples: the first dimension of the first tensor (or of ``input_ids``)."""
    first = batch["input_ids"] if isinstance(batch, Mapping) else batch[0]
    return int(first.shape[0])


def mse_sum(model: nn.Module, batch: Batch) -> torch.Tensor:
    """Sum over samples of each sample's mean squared error; batch = (x, y)."""
    x, y = batch
    return (model(x) - y).pow(2).flatten(1).mean(1).sum()


def lm_token_loss_sum(model: nn.Module, batch: Mapping) -> torch.Tensor:
    """Sum over labelled tokens of the next-token cross-entropy of a causal LM (e.g. GPT-2).

    Computed from the logits in the model's own dtype: transformers' built-in loss casts logits
    to float32, which would spoil a float64 comparison."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    return F.cross_entropy(
        logits[:, :-1].flatten(0, 1), batch["labels"][:, 1:].flatten(), ignore_index=-100, reduction="sum"
    )
