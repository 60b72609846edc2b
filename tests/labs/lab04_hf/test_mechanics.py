"""hf.mechanics: what accelerator.backward and num_items_in_batch do (the scheduler loops are lab 4 cells)."""

from __future__ import annotations

import pytest

from lab_utils.data import count_tokens
from lab_utils.labs.lab04_hf import guards, mechanics


def test_backward_divides_by_accumulation_steps():
    for k in (2, 4):
        r = mechanics.backward_scaling(k)
        assert r.inside == pytest.approx(1 / k, rel=1e-5)
        assert r.outside == pytest.approx(1 / k, rel=1e-5)  # outside accumulate() too
        assert r.grad_accum == k
    assert not guards.accelerator_exists()


def test_uneven_window_pads_labels_with_ignore_index():
    parts = mechanics.uneven_window(4, per_micro=2, seed=0)
    assert len({p["input_ids"].shape[1] for p in parts}) == 1  # one width: they form a big batch
    tokens = [count_tokens(p) for p in parts]
    assert min(tokens) * 4 < max(tokens)  # very uneven on purpose
    for p in parts:
        assert ((p["attention_mask"] == 0) == (p["labels"] == -100)).all()
    with pytest.raises(ValueError, match="micro_batches=1"):
        mechanics.uneven_window(1)


def test_num_items_in_batch_matches_the_big_batch():
    r = mechanics.token_loss_normalisation()
    assert len(set(r.tokens_per_micro_batch)) > 1  # uneven on purpose
    assert r.num_items_in_batch == pytest.approx(r.big_batch, rel=1e-5)
    assert r.grad_gap_num_items < 1e-4
    assert r.grad_gap_mean_of_means > 1e-2
