"""The lab's job: a tiny GPT-2 sequence classifier on in-memory token sequences, and its metrics."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch

from lab_utils.data import token_classification
from lab_utils.models import tiny_classifier

__all__ = ["offline", "ClassificationDataset", "make_splits", "accuracy_f1", "compute_metrics", "build_model"]


def offline() -> None:
    """Forbid hub downloads in this process (and the ranks it starts): everything is built locally."""
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        os.environ[var] = "1"
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


class ClassificationDataset(torch.utils.data.Dataset):
    """Dict items (``input_ids``, ``attention_mask``, ``labels``) over in-memory tensors.

    ``record=True`` appends every index that is read to ``self.order``: the order a loader used."""

    def __init__(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor, *, record: bool = False
    ):
        if not len(input_ids) == len(attention_mask) == len(labels):
            raise ValueError("input_ids, attention_mask and labels need the same length")
        self.input_ids, self.attention_mask, self.labels = input_ids, attention_mask, labels
        self.record, self.order = record, []

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        if self.record:
            self.order.append(int(i))
        return {"input_ids": self.input_ids[i], "attention_mask": self.attention_mask[i], "labels": self.labels[i]}


def make_splits(
    n_train: int = 256, n_val: int = 128, *, max_len: int = 24, seed: int = 0
) -> tuple[ClassificationDataset, ClassificationDataset]:
    """Train and validation splits of ``lab_utils.data.token_classification`` (label 1 iff a
    sequence holds more 'high' tokens than 'low' ones): a signal a tiny transformer can learn."""
    if n_train < 1 or n_val < 1:
        raise ValueError(f"make_splits(n_train={n_train}, n_val={n_val}): both must be >= 1")
    ids, mask, labels = token_classification(n_train + n_val, max_len=max_len, seed=seed)
    train = ClassificationDataset(ids[:n_train], mask[:n_train], labels[:n_train], record=True)
    val = ClassificationDataset(ids[n_train:], mask[n_train:], labels[n_train:])
    return train, val


def accuracy_f1(predictions: Any, labels: Any) -> dict[str, float]:
    """Accuracy and F1 of the positive class (label 1), from class ids or from logits [n, classes].

    F1 = 2 TP / (2 TP + FP + FN); 0.0 when there is no positive prediction and no positive label."""
    preds, refs = np.asarray(predictions), np.asarray(labels).reshape(-1)
    if preds.ndim == 2:
        preds = preds.argmax(-1)
    preds = preds.reshape(-1)
    if preds.shape != refs.shape:
        raise ValueError(f"{preds.shape[0]} predictions for {refs.shape[0]} labels: pass one prediction per label")
    tp = int(((preds == 1) & (refs == 1)).sum())
    fp = int(((preds == 1) & (refs != 1)).sum())
    fn = int(((preds != 1) & (refs == 1)).sum())
    denom = 2 * tp + fp + fn
    return {
        "accuracy": float((preds == refs).mean()) if refs.size else float("nan"),
        "f1": 2 * tp / denom if denom else 0.0,
    }


def compute_metrics(eval_pred: Any) -> dict[str, float]:
    """The Trainer's ``compute_metrics``: an ``EvalPrediction`` (logits, labels) -> accuracy and F1."""
    logits, labels = eval_pred[0], eval_pred[1]
    if isinstance(logits, (tuple, list)):
        logits = logits[0]
    return accuracy_f1(logits, labels)


def build_model() -> torch.nn.Module:
    """``lab_utils.models.tiny_classifier`` (GPT-2 from a config, 2 labels), offline, fixed init."""
    offline()
    return tiny_classifier(num_labels=2, n_layer=2, n_embd=64, seed=0)
