"""The large-batch reference the graders trust, checked against loops written here by hand."""

import copy

import pytest
import torch
import torch.nn.functional as F

from lab_utils import data, models
from lab_utils.checks import param_max_diff
from lab_utils.labs.lab02_accumulation import count_items, count_tokens, lm_token_loss_sum, mse_sum, windows
from lab_utils.labs.lab02_accumulation.reference import large_batch_grads, train_large_batch

F64 = torch.float64


def regression_setup(n_micro=12, mb=8, dtype=F64):
    x, y = data.regression(n=n_micro * mb, dim=8, out_dim=2, dtype=dtype)
    return models.mlp(16, 2, in_dim=8, out_dim=2, dtype=dtype), list(data.batches(x, y, batch_size=mb))


def plain_loop(model, opt, micro, k):
    """The textbook loop (loss / K, step every K), written independently of lab_utils."""
    opt.zero_grad()
    for i, (x, y) in enumerate(micro):
        (F.mse_loss(model(x), y) / k).backward()
        if (i + 1) % k == 0:
            opt.step()
            opt.zero_grad()


def pair(model, opt_cls=torch.optim.SGD, **kw):
    a, b = copy.deepcopy(model), copy.deepcopy(model)
    return (a, opt_cls(a.parameters(), **kw)), (b, opt_cls(b.parameters(), **kw))


def flat(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


@pytest.mark.parametrize(
    "opt_cls,kw", [(torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}), (torch.optim.AdamW, {"lr": 1e-2})]
)
def test_plain_loop_equals_large_batch_float64(opt_cls, kw):
    model, micro = regression_setup()
    (a, oa), (b, ob) = pair(model, opt_cls, **kw)
    plain_loop(a, oa, micro, 4)
    train_large_batch(b, ob, micro, 4, loss_sum=mse_sum)
    assert param_max_diff(a, b) < 1e-12
    assert param_max_diff(a, model) > 1e-3  # it really trained


def test_plain_loop_float32_close():
    model, micro = regression_setup(dtype=torch.float32)
    (a, oa), (b, ob) = pair(model, lr=0.1)
    plain_loop(a, oa, micro, 4)
    train_large_batch(b, ob, micro, 4, loss_sum=mse_sum)
    assert param_max_diff(a, b) < 1e-5


def test_forgetting_to_divide_by_k_makes_the_step_k_times_larger():
    k = 4
    model, micro = regression_setup(n_micro=k)
    (a, oa), (b, ob) = pair(model, lr=0.01)
    for x, y in micro:
        F.mse_loss(a(x), y).backward()  # forgot / K
    oa.step()
    train_large_batch(b, ob, micro, k, loss_sum=mse_sum)
    assert torch.allclose(flat(a) - flat(model), k * (flat(b) - flat(model)), rtol=0, atol=1e-12)


def test_short_last_window_is_a_smaller_batch():
    model, micro = regression_setup(n_micro=10)  # K=4: windows of 4, 4, 2
    (a, oa), (b, ob) = pair(model, lr=0.1)
    for window in windows(micro, 4):
        for x, y in window:
            (F.mse_loss(a(x), y) / len(window)).backward()  # divided by its real size
        oa.step()
        oa.zero_grad()
    assert len(train_large_batch(b, ob, micro, 4, loss_sum=mse_sum)) == 3
    assert param_max_diff(a, b) < 1e-12


def test_token_window_normalisation_equals_large_batch_and_mean_of_means_does_not():
    micro = [data.lm_batch(n=3, vocab_size=64, min_len=3, max_len=16, seed=s) for s in range(4)]
    assert len({count_tokens(mb) for mb in micro}) > 1
    model = models.tiny_gpt2(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=32).to(F64)
    ref = large_batch_grads(model, micro, loss_sum=lm_token_loss_sum, items=count_tokens)
    n = sum(count_tokens(mb) for mb in micro)
    window = torch.autograd.grad(sum(lm_token_loss_sum(model, mb) / n for mb in micro), list(model.parameters()))
    means = torch.autograd.grad(
        sum(lm_token_loss_sum(model, mb) / count_tokens(mb) / 4 for mb in micro), list(model.parameters())
    )
    assert param_max_diff(window, ref) < 1e-12
    assert param_max_diff(means, ref) > 1e-6
    assert all(p.grad is None for p in model.parameters())  # the reference leaves .grad alone


def test_clipping_reference_clips_the_window_gradient():
    model, micro = regression_setup(n_micro=4)
    (a, oa), (b, ob) = pair(model, lr=0.1)
    norms = train_large_batch(a, oa, micro, 4, loss_sum=mse_sum, max_norm=0.01)
    grads = large_batch_grads(b, micro, loss_sum=mse_sum, items=count_items)
    full = torch.cat([g.flatten() for g in grads]).norm().item()
    assert norms == pytest.approx([full])
    # the step is lr * the gradient scaled to norm 0.01 (clip_grad_norm_ adds 1e-6 to the norm)
    assert (flat(a) - flat(model)).norm().item() == pytest.approx(0.1 * 0.01, rel=1e-5)


def test_exact_clip_scales_to_max_norm_itself_and_leaves_short_gradients_alone():
    model, micro = regression_setup(n_micro=4)
    (a, oa), (b, ob) = pair(model, lr=0.1)
    norms = train_large_batch(a, oa, micro, 4, loss_sum=mse_sum, max_norm=0.01, exact_clip=True)
    train_large_batch(b, ob, micro, 4, loss_sum=mse_sum, max_norm=0.01)
    assert norms[0] > 0.01
    # the step is lr * the gradient scaled to norm 0.01 exactly; clip_grad_norm_'s 1e-6 makes it shorter
    assert (flat(a) - flat(model)).norm().item() == pytest.approx(0.1 * 0.01, rel=1e-12)
    assert 0 < param_max_diff(a, b) < 1e-8
    (c, oc), (d, od) = pair(model, lr=0.1)
    train_large_batch(c, oc, micro, 4, loss_sum=mse_sum, max_norm=10.0, exact_clip=True)  # does not bind
    train_large_batch(d, od, micro, 4, loss_sum=mse_sum)
    assert param_max_diff(c, d) == 0


@pytest.mark.parametrize("max_norm", [None, 0.01])
def test_the_lab_s_large_batch_cell_equals_this_reference(max_norm):
    # the lab teaches its own large_batch (cell 5); the graders trust train_large_batch: the same steps
    from tests.helpers.cells import notebook_functions

    large_batch = notebook_functions("02_gradient_accumulation", "large_batch")["large_batch"]
    model, micro = regression_setup(n_micro=10)  # 10 micro-batches, K = 4: the last window is short
    (a, oa), (b, ob) = pair(model, torch.optim.SGD, lr=0.1, momentum=0.9)
    lab_norms = large_batch(a, oa, micro, 4, max_norm=max_norm)
    ref_norms = train_large_batch(b, ob, micro, 4, loss_sum=mse_sum, max_norm=max_norm)
    assert param_max_diff(a, b) < 1e-12 and param_max_diff(a, model) > 1e-4
    if max_norm is not None:
        assert lab_norms == pytest.approx(ref_norms, rel=1e-12)
