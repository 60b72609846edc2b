"""hf.data: the job's splits, metrics and model."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from lab_utils.labs.lab04_hf import data


def test_accuracy_f1_by_hand():
    preds, labels = [1, 1, 0, 0, 1], [1, 0, 0, 1, 1]
    # TP=2 (idx 0, 4), FP=1 (idx 1), FN=1 (idx 3): F1 = 4 / (4 + 1 + 1); 3 of 5 right
    m = data.accuracy_f1(preds, labels)
    assert m["accuracy"] == pytest.approx(0.6) and m["f1"] == pytest.approx(4 / 6)
    logits = np.array([[0.0, 2.0], [0.0, 1.0], [3.0, 0.0], [1.0, 0.0], [-1.0, 0.0]])
    assert data.compute_metrics((logits, np.array(labels))) == m
    assert data.accuracy_f1([0, 0], [0, 0])["f1"] == 0.0  # no positives anywhere
    with pytest.raises(ValueError, match="predictions"):
        data.accuracy_f1([1, 0], [1])


def test_splits_follow_the_rule_and_do_not_overlap():
    train, val = data.make_splits(40, 20, max_len=12, seed=3)
    assert len(train) == 40 and len(val) == 20
    for ds in (train, val):
        for i in range(len(ds)):
            item = ds[i]
            ids = item["input_ids"][item["attention_mask"].bool()]
            high = int((ids >= 64).sum())
            assert int(item["labels"]) == int(2 * high > len(ids))
    assert not any(torch.equal(train.input_ids[i], val.input_ids[j]) for i in range(40) for j in range(20))
    assert train.order == list(range(40)) and val.order == []  # only the train split records reads
    assert 0.2 < train.labels.float().mean() < 0.8
    with pytest.raises(ValueError, match="n_train=0"):
        data.make_splits(0, 4)


def test_checkpointing_is_enabled_under_its_new_name_without_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = data.build_model()
        assert not model.is_activation_checkpointing
        model.activation_checkpointing_enable()
        assert model.is_activation_checkpointing
