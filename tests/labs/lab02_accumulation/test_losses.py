"""Loss sums and their counts agree with the library means they split in two."""

import torch
import torch.nn.functional as F

from lab_utils import data, models
from lab_utils.labs.lab02_accumulation import count_items, count_tokens, lm_token_loss_sum, mse_sum


def test_count_tokens_by_hand():
    batch = data.lm_batch(n=5, min_len=3, max_len=12, seed=3)
    lengths = batch["attention_mask"].sum(1).tolist()
    # each sequence of length L predicts L - 1 next tokens
    assert count_tokens(batch) == sum(L - 1 for L in lengths)
    assert count_items(batch) == 5


def test_mse_sum_over_count_is_the_mean():
    x, y = data.regression(n=12, dim=8, out_dim=2, dtype=torch.float64)
    model = models.mlp(16, 2, in_dim=8, out_dim=2, dtype=torch.float64)
    assert torch.allclose(mse_sum(model, (x, y)) / count_items((x, y)), F.mse_loss(model(x), y), atol=1e-15)


def test_lm_token_loss_matches_transformers_loss():
    model = models.tiny_gpt2(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=32)
    mb = data.lm_batch(n=3, vocab_size=64, min_len=3, max_len=16, seed=0)
    ours = lm_token_loss_sum(model, mb) / count_tokens(mb)
    theirs = model(**mb).loss  # transformers: mean over labelled, shifted tokens
    assert torch.allclose(ours, theirs, atol=1e-6)
