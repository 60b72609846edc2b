"""Lab 2 figures: gradient accumulation against one large batch, measured on tiny models."""

from __future__ import annotations

import copy

import plotly.graph_objects as go

from figures import figure

K, MB = 4, 8


def _fresh(model, lr=0.05, momentum=0.9):
    import torch

    m = copy.deepcopy(model)
    return m, torch.optim.SGD(m.parameters(), lr=lr, momentum=momentum)


def _distance(model0, micro, **kw):
    """Largest parameter difference between an accumulated run and the large-batch reference."""
    from lab_utils import accumulation as acc
    from lab_utils.checks import param_max_diff

    loss_fn, items = kw.pop("loss_fn", acc.mse_sum), kw.pop("items", acc.count_items)
    lr, momentum, train_mode = kw.pop("lr", 0.05), kw.pop("momentum", 0.9), kw.pop("train_mode", True)
    (a, oa), (b, ob) = _fresh(model0, lr, momentum), _fresh(model0, lr, momentum)
    a.train(train_mode), b.train(train_mode)
    acc.train_accumulated(a, oa, micro, K, loss_fn, items=items, **kw)
    acc.train_large_batch(b, ob, micro, K, loss_fn, items=items)
    return param_max_diff(a, b)


@figure("accumulation.gap")
def gap() -> go.Figure:
    """Each accumulation loop (right and wrong) trained next to one large batch: the distance left."""
    import torch
    from torch import nn

    from lab_utils import accumulation as acc
    from lab_utils import data, models
    from lab_utils.plots.accumulation import gap_figure

    x, y = data.regression(n=8 * MB, dim=8, out_dim=2, dtype=torch.float64)
    micro = list(data.batches(x, y, batch_size=MB))
    base = models.mlp(32, 3, in_dim=8, out_dim=2, dtype=torch.float64)
    lm_micro = [data.lm_batch(n=4, min_len=4, max_len=32, seed=s) for s in range(2 * K)]
    lm_base = models.tiny_gpt2(n_layer=1, n_embd=32).to(torch.float64)
    lm = dict(loss_fn=acc.lm_token_loss_sum, items=acc.count_tokens, lr=0.5, momentum=0.0)

    def bn_mlp(kind):
        torch.manual_seed(0)
        norm = nn.BatchNorm1d(32) if kind == "batchnorm" else nn.LayerNorm(32)
        return nn.Sequential(nn.Linear(8, 32), norm, nn.ReLU(), nn.Linear(32, 2)).to(torch.float64)

    gaps = {
        "plain loop (loss / K)": _distance(base, micro, normalize="mean-of-means"),
        "forgot / K": _distance(base, micro, normalize="none"),
        "tokens: mean of means": _distance(lm_base, lm_micro, normalize="mean-of-means", **lm),
        "fixed: token sum / window tokens": _distance(lm_base, lm_micro, normalize="window", **lm),
        "BatchNorm (train mode)": _distance(bn_mlp("batchnorm"), micro),
        "fixed: LayerNorm": _distance(bn_mlp("layernorm"), micro),
    }
    return gap_figure(gaps)


@figure("accumulation.token_weight")
def token_weight() -> go.Figure:
    """How much one token counts under the mean of micro-batch means (real padded LM batches)."""
    from lab_utils import accumulation as acc
    from lab_utils import data
    from lab_utils.plots.accumulation import token_weight_figure

    tokens = [acc.count_tokens(data.lm_batch(n=4, min_len=4, max_len=32, seed=s)) for s in range(K)]
    return token_weight_figure(tokens)


@figure("accumulation.memory_speed")
def memory_speed() -> go.Figure:
    """A fixed effective batch split into smaller micro-batches: activations kept, samples/s."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    from lab_utils import models
    from lab_utils.env import device, pick
    from lab_utils.memory import measure_step
    from lab_utils.plots.accumulation import memory_speed_figure
    from lab_utils.timing import throughput, time_fn

    dev = device()
    B, T, D = pick(student=16, smoke=8), pick(student=32, smoke=16), pick(student=64, smoke=32)
    net = nn.Sequential(*models.transformer_chain(2, D), nn.Linear(D, 1)).to(dev)
    gen = torch.Generator().manual_seed(0)
    xs, ys = torch.randn(B, T, D, generator=gen).to(dev), torch.randn(B, T, 1, generator=gen).to(dev)
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)

    def update(micro):
        k = B // micro
        for i in range(k):
            sl = slice(i * micro, (i + 1) * micro)
            (F.mse_loss(net(xs[sl]), ys[sl]) / k).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    sizes = [B // 2**j for j in range(B.bit_length()) if B % 2**j == 0]
    saved, speed = [], []
    for micro in sizes:
        rep = measure_step(net, lambda: F.mse_loss(net(xs[:micro]), ys[:micro]), exclude=[xs, ys])
        opt.zero_grad(set_to_none=True)
        saved.append(rep.saved_bytes)
        speed.append(throughput(B, time_fn(lambda: update(micro), warmup=1, repeat=3).median))
    return memory_speed_figure(
        sizes, saved, speed, effective_batch=B, device=str(dev), memory_label="activations saved for backward (MiB)"
    )
