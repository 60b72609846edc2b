"""Gradient accumulation: each loop is compared with one large batch, computed independently."""

import copy

import pytest
import torch
from torch import nn

from lab_utils import data, models
from lab_utils.accumulation import (
    GradientAggregationOptimizer,
    concat_batches,
    count_items,
    count_tokens,
    cross_entropy_sum,
    lm_token_loss_sum,
    mse_sum,
    num_updates,
    train_accumulated,
    train_large_batch,
    window_sizes,
    windows,
)
from lab_utils.checks import param_max_diff

F64 = torch.float64


def regression_setup(n_micro=12, mb=8, dtype=F64, seed=0):
    x, y = data.regression(n=n_micro * mb, dim=8, out_dim=2, dtype=dtype, seed=seed)
    micro = list(data.batches(x, y, batch_size=mb))
    model = models.mlp(16, 2, in_dim=8, out_dim=2, dtype=dtype, seed=seed)
    return model, micro


def pair(model, opt_cls=torch.optim.SGD, **opt_kw):
    """Two identical copies of ``model``, each with its own optimizer."""
    a, b = copy.deepcopy(model), copy.deepcopy(model)
    return (a, opt_cls(a.parameters(), **opt_kw)), (b, opt_cls(b.parameters(), **opt_kw))


def flat(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


# ----------------------------------------------------------------------------- windows and counts
def test_windows_sizes_and_update_counts():
    assert window_sizes(10, 4) == [4, 4, 2]
    assert window_sizes(10, 4, drop_last=True) == [4, 4]
    assert window_sizes(8, 4) == [4, 4]
    assert windows(list("abcde"), 2) == [["a", "b"], ["c", "d"], ["e"]]
    assert num_updates(10, 4) == 3
    assert num_updates(10, 4, drop_last=True) == 2
    assert num_updates(10, 4, epochs=3) == 9
    with pytest.raises(ValueError, match="k=0"):
        windows([1, 2], 0)


def test_count_tokens_by_hand():
    batch = data.lm_batch(n=5, min_len=3, max_len=12, seed=3)
    lengths = batch["attention_mask"].sum(1).tolist()
    # each sequence of length L predicts L - 1 next tokens
    assert count_tokens(batch) == sum(L - 1 for L in lengths)
    assert count_items(batch) == 5


def test_concat_batches_tuple_and_dict():
    a, b = (torch.zeros(2, 3), torch.ones(2)), (torch.ones(1, 3), torch.zeros(1))
    x, y = concat_batches([a, b])
    assert x.shape == (3, 3) and y.tolist() == [1.0, 1.0, 0.0]
    d = concat_batches([{"u": torch.zeros(2, 4)}, {"u": torch.ones(3, 4)}])
    assert d["u"].shape == (5, 4)
    with pytest.raises(ValueError, match="pad"):
        concat_batches([{"u": torch.zeros(2, 4)}, {"u": torch.ones(3, 5)}])


# ----------------------------------------------------------------------------- the plain loop
@pytest.mark.parametrize(
    "opt_cls,kw", [(torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}), (torch.optim.AdamW, {"lr": 1e-2})]
)
def test_plain_loop_equals_large_batch_float64(opt_cls, kw):
    model, micro = regression_setup()
    (a, oa), (b, ob) = pair(model, opt_cls, **kw)
    train_accumulated(a, oa, micro, 4, mse_sum, normalize="mean-of-means")
    train_large_batch(b, ob, micro, 4, mse_sum)
    assert param_max_diff(a, b) < 1e-12
    assert param_max_diff(a, model) > 1e-3  # it really trained


def test_plain_loop_float32_close_not_bitwise_required():
    model, micro = regression_setup(dtype=torch.float32)
    (a, oa), (b, ob) = pair(model, lr=0.1)
    train_accumulated(a, oa, micro, 4, mse_sum, normalize="mean-of-means")
    train_large_batch(b, ob, micro, 4, mse_sum)
    assert param_max_diff(a, b) < 1e-5


def test_forgetting_to_divide_by_k_makes_the_step_k_times_larger():
    k = 4
    model, micro = regression_setup(n_micro=k)  # one window, one update
    (a, oa), (b, ob) = pair(model, lr=0.01)
    train_accumulated(a, oa, micro, k, mse_sum, normalize="none")
    train_large_batch(b, ob, micro, k, mse_sum)
    step_bug, step_ref = flat(a) - flat(model), flat(b) - flat(model)
    assert torch.allclose(step_bug, k * step_ref, rtol=0, atol=1e-12)
    assert param_max_diff(a, b) > 1e-4


# ----------------------------------------------------------------------------- token losses
def lm_setup(equal_lengths=False, n_micro=4):
    lo, hi = (16, 16) if equal_lengths else (3, 16)
    micro = [data.lm_batch(n=3, vocab_size=64, min_len=lo, max_len=hi, seed=s) for s in range(n_micro)]
    model = models.tiny_gpt2(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=32).to(F64)
    return model, micro


def test_mean_of_means_is_wrong_for_padded_tokens_and_window_count_fixes_it():
    model, micro = lm_setup()
    assert len({count_tokens(mb) for mb in micro}) > 1  # the micro-batches hold different counts
    (
        (a, oa),
        (b, ob),
    ) = pair(model, lr=0.5)
    (c, oc), _ = pair(model, lr=0.5)
    train_accumulated(a, oa, micro, 4, lm_token_loss_sum, items=count_tokens, normalize="mean-of-means")
    train_accumulated(c, oc, micro, 4, lm_token_loss_sum, items=count_tokens, normalize="window")
    train_large_batch(b, ob, micro, 4, lm_token_loss_sum, items=count_tokens)
    assert param_max_diff(a, b) > 1e-6
    assert param_max_diff(c, b) < 1e-12


def test_mean_of_means_is_right_when_every_micro_batch_has_the_same_token_count():
    model, micro = lm_setup(equal_lengths=True)
    (a, oa), (b, ob) = pair(model, lr=0.5)
    train_accumulated(a, oa, micro, 4, lm_token_loss_sum, items=count_tokens, normalize="mean-of-means")
    train_large_batch(b, ob, micro, 4, lm_token_loss_sum, items=count_tokens)
    assert param_max_diff(a, b) < 1e-12


def test_lm_token_loss_matches_transformers_loss():
    model, micro = lm_setup()
    model = model.float()
    mb = micro[0]
    ours = lm_token_loss_sum(model, mb) / count_tokens(mb)
    theirs = model(**mb).loss  # transformers: mean over labelled, shifted tokens
    assert torch.allclose(ours, theirs, atol=1e-6)


# ----------------------------------------------------------------------------- BatchNorm
def bn_model(norm):
    torch.manual_seed(0)
    layer = nn.BatchNorm1d(16) if norm == "batch" else nn.LayerNorm(16)
    return nn.Sequential(nn.Linear(8, 16), layer, nn.ReLU(), nn.Linear(16, 2)).to(F64)


def test_batchnorm_breaks_equivalence_layernorm_and_frozen_bn_do_not():
    _, micro = regression_setup()
    gaps = {}
    for name, norm, train in [("bn", "batch", True), ("ln", "layer", True), ("bn-eval", "batch", False)]:
        (a, oa), (b, ob) = pair(bn_model(norm), lr=0.1)
        a.train(train), b.train(train)
        train_accumulated(a, oa, micro, 4, mse_sum, normalize="mean-of-means")
        train_large_batch(b, ob, micro, 4, mse_sum)
        gaps[name] = param_max_diff(a, b)
    assert gaps["bn"] > 1e-4
    assert gaps["ln"] < 1e-12 and gaps["bn-eval"] < 1e-12


# ----------------------------------------------------------------------------- short last window
def test_short_last_window():
    model, micro = regression_setup(n_micro=10)  # K=4: windows of 4, 4, 2
    ref, ref_opt = pair(model, lr=0.1)[0]
    train_large_batch(ref, ref_opt, micro, 4, mse_sum)
    gaps = {}
    for mode in ("real-size", "divide-by-k"):
        (a, oa), _ = pair(model, lr=0.1)
        hist = train_accumulated(a, oa, micro, 4, mse_sum, normalize="mean-of-means", last_window=mode)
        assert hist.updates == 3
        gaps[mode] = param_max_diff(a, ref)
    assert gaps["real-size"] < 1e-12 and gaps["divide-by-k"] > 1e-4
    (a, oa), _ = pair(model, lr=0.1)
    hist = train_accumulated(a, oa, micro, 4, mse_sum, normalize="mean-of-means", last_window="skip")
    assert hist.updates == 2 and hist.leftover_micro_batches == 2
    assert any(p.grad is not None for p in a.parameters())  # the leftover gradient is still there


def test_divide_by_k_on_a_short_window_scales_the_step_by_r_over_k():
    model, micro = regression_setup(n_micro=2)  # a single window of r=2 with K=4
    (a, oa), (b, ob) = pair(model, lr=0.01)
    train_accumulated(a, oa, micro, 4, mse_sum, normalize="mean-of-means", last_window="divide-by-k")
    train_large_batch(b, ob, micro, 4, mse_sum)
    assert torch.allclose(flat(a) - flat(model), 0.5 * (flat(b) - flat(model)), rtol=0, atol=1e-12)


# ----------------------------------------------------------------------------- schedulers
@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before")
def test_scheduler_per_update_matches_and_per_micro_batch_decays_k_times_faster():
    k, gamma = 3, 0.5
    model, micro = regression_setup(n_micro=12)
    (a, oa), (b, ob) = pair(model, lr=0.1)
    (c, oc), _ = pair(model, lr=0.1)
    ha = train_accumulated(a, oa, micro, k, mse_sum, scheduler=torch.optim.lr_scheduler.ExponentialLR(oa, gamma))
    hb = train_large_batch(b, ob, micro, k, mse_sum, scheduler=torch.optim.lr_scheduler.ExponentialLR(ob, gamma))
    hc = train_accumulated(
        c,
        oc,
        micro,
        k,
        mse_sum,
        scheduler=torch.optim.lr_scheduler.ExponentialLR(oc, gamma),
        scheduler_per="micro-batch",
    )
    assert ha.lrs == pytest.approx([0.1 * gamma**j for j in range(4)])
    assert hb.lrs == pytest.approx(ha.lrs)
    assert hc.lrs == pytest.approx([0.1 * gamma ** (k * j + k) for j in range(4)])
    assert param_max_diff(a, b) < 1e-12 and param_max_diff(c, b) > 1e-4


# ----------------------------------------------------------------------------- explicit accumulator
def test_explicit_buffers_equal_autograd_grad_accumulation():
    k = 3
    model, micro = regression_setup(n_micro=k)
    a, b = copy.deepcopy(model), copy.deepcopy(model)
    agg = GradientAggregationOptimizer(torch.optim.SGD(a.parameters(), lr=0.1), k)
    for mb in micro[: k - 1]:  # all but the last: the buffers hold the running sum / k
        grads = agg.compute_gradients(mse_sum(a, mb) / count_items(mb))
        assert not agg.apply_gradients(grads)
        assert all(p.grad is None for p in a.parameters())  # .grad untouched
        (mse_sum(b, mb) / count_items(mb) / k).backward()
    for acc, p in zip(agg.grad_accum, b.parameters()):
        assert torch.allclose(acc, p.grad, rtol=0, atol=1e-15)
    assert agg.apply_gradients(agg.compute_gradients(mse_sum(a, micro[-1]) / count_items(micro[-1])))
    assert agg.global_step == 1 and all(acc.abs().max() == 0 for acc in agg.grad_accum)  # reset


@pytest.mark.parametrize("n_micro", [12, 10])
def test_explicit_accumulator_trains_like_the_plain_loop(n_micro):
    model, micro = regression_setup(n_micro=n_micro)
    (a, oa), (b, ob) = pair(model, torch.optim.AdamW, lr=1e-2)
    agg = GradientAggregationOptimizer(oa, 4)
    for mb in micro:
        agg.apply_gradients(agg.compute_gradients(mse_sum(a, mb) / count_items(mb)))
    flushed = agg.flush()
    assert flushed == (n_micro % 4 != 0)
    assert agg.global_step == num_updates(n_micro, 4)
    train_accumulated(b, ob, micro, 4, mse_sum, normalize="mean-of-means")
    assert param_max_diff(a, b) < 1e-12


def test_cross_entropy_sum_and_errors():
    x, y = data.classification(n=32, dim=8, n_classes=3)
    model = nn.Linear(8, 3)
    assert torch.allclose(cross_entropy_sum(model, (x, y)) / 32, nn.functional.cross_entropy(model(x), y))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="normalize"):
        train_accumulated(model, opt, [(x, y)], 1, cross_entropy_sum, normalize="mean")
    with pytest.raises(ValueError, match="num_micro_batches"):
        GradientAggregationOptimizer(opt, 0)
    with pytest.raises(ValueError, match="gradients for"):
        GradientAggregationOptimizer(opt, 2).apply_gradients([])


# ----------------------------------------------------------------------------- figures
def test_figures_show_the_measured_values():
    from lab_utils.plots.accumulation import gap_figure, seed_table_figure, token_weight_figure

    fig = token_weight_figure([10, 30])  # K=2, 40 tokens: weights 40/(2*10) = 2 and 40/(2*30) = 2/3
    assert list(fig.data[0].y) == pytest.approx([2.0, 2 / 3]) and list(fig.data[1].y) == [1.0, 1.0]
    with pytest.raises(ValueError, match="tokens_per_micro_batch"):
        token_weight_figure([3, 0])
    fig = gap_figure({"ok": 1e-17, "bug": 0.1, "zero": 0.0})
    assert list(fig.data[0].marker.color) == ["#2a9d8f", "#e76f51", "#2a9d8f"]
    assert fig.data[0].x[2] == 1e-18  # an exact zero drawn at the floor of the log axis
    rows = [
        {"seconds": 2.0, "peak_bytes": 8.0},
        {"seconds": 3.0, "peak_bytes": 2.0},
        {"seconds": 4.0, "peak_bytes": 1.0},
    ]
    fig = seed_table_figure(rows)
    measured_time, measured_mem = fig.data[0].y, fig.data[1].y
    assert list(measured_time) == [1.0, 1.5, 2.0] and list(measured_mem) == [1.0, 0.25, 0.125]
    assert len(fig.data) == 2  # only numbers measured here
    with pytest.raises(ValueError, match="measured rows"):
        seed_table_figure(rows[:2])


def test_skipped_last_window_leaks_into_the_next_epoch():
    model, micro = regression_setup(n_micro=6)  # K=4: one full window, then 2 leftover micro-batches
    (a, oa), (b, ob) = pair(model, lr=0.1)
    train_accumulated(a, oa, micro, 4, mse_sum, normalize="mean-of-means", last_window="skip", epochs=2)
    # by hand: the leftover gradients of epoch 1 are still in .grad when epoch 2's first window starts
    ob.zero_grad()
    for epoch in range(2):
        for i, mb in enumerate(micro):
            (mse_sum(b, mb) / count_items(mb) / 4).backward()
            if (i + 1) % 4 == 0:
                ob.step()
                ob.zero_grad()
    assert param_max_diff(a, b) < 1e-12
    (c, oc), _ = pair(model, lr=0.1)
    train_accumulated(c, oc, micro[:4], 4, mse_sum, normalize="mean-of-means", epochs=2)  # leftovers dropped
    assert param_max_diff(a, c) > 1e-4
