"""The lab's data sets have the properties its demonstrations rely on."""

import pytest
import torch

from lab_utils.labs.lab02_accumulation import count_tokens, datasets


def test_lm_by_length_groups_lengths_and_makes_short_sequences_random_and_long_ones_count():
    micro = datasets.lm_by_length(n_windows=3, k=4, per_micro=4, vocab_size=32, seed=1)
    assert len(micro) == 12 and all(mb["input_ids"].shape == (4, 64) for mb in micro)
    for w in range(3):
        lengths = torch.cat([mb["attention_mask"].sum(1) for mb in micro[4 * w : 4 * w + 4]]).tolist()
        assert lengths == sorted(lengths) and min(lengths) >= 2 and max(lengths) <= 64
        tokens = [count_tokens(mb) for mb in micro[4 * w : 4 * w + 4]]
        assert tokens[-1] > 3 * tokens[0]  # the point of the data: very different token counts
    counting = random = 0
    for mb in micro:
        assert torch.equal(mb["labels"] == -100, mb["attention_mask"] == 0)
        for ids, n in zip(mb["input_ids"], mb["attention_mask"].sum(1).tolist()):
            steps = (ids[1:n] - ids[: n - 1]) % 31  # +1 each token, wrapping within 1..31
            if n > 8:
                assert bool((steps == 1).all()), "a long sequence must count upward"
                counting += 1
            elif n > 3:
                random += int(not bool((steps == 1).all()))
    assert counting > 0 and random > 0


def test_noisy_labels_flips_about_the_asked_fraction_and_rejects_bad_input():
    (xt, yt), (xv, yv) = datasets.noisy_labels(n_train=400, n_val=50, noise=0.25, seed=0)
    (_, clean), _ = datasets.noisy_labels(n_train=400, n_val=50, noise=0.0, seed=0)
    assert xt.shape == (400, 16) and xv.shape == (50, 16) and yv.shape == (50,)
    assert 0.18 < (yt != clean).float().mean().item() < 0.32
    with pytest.raises(ValueError, match="noise"):
        datasets.noisy_labels(noise=0.5)
    with pytest.raises(ValueError, match="min_len"):
        datasets.lm_by_length(1, 1, 1, min_len=1)
