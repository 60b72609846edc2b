"""The lab task: hand-counted model size, shards that partition the data, errors that say what to do."""

from __future__ import annotations

import pytest
import torch

from lab_utils.labs.lab05_local_sgd import task


def n_params(dim=32, classes=10, width=64, depth=2) -> int:
    """Parameters of the lab MLP, counted by hand: input layer, depth blocks, output layer."""
    return dim * width + width + depth * (width * width + width) + width * classes + classes


def test_model_size_and_same_start_on_every_rank():
    a, b = task.make_model(), task.make_model()
    assert sum(p.numel() for p in a.parameters()) == n_params() == 11_082
    assert len(list(a.parameters())) == 8  # 4 Linear layers: weight and bias each
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    bn = task.make_model(batchnorm=True)
    assert sum(b.numel() for b in bn.buffers() if b.is_floating_point()) == 2 * 64  # running mean and var


def test_rank_shards_partition_the_data():
    y = torch.arange(40) % 10
    for skew in (0.0, 0.5, 1.0):
        shards = [task.rank_shard(y, r, 2, skew) for r in range(2)]
        assert sorted(torch.cat(shards).tolist()) == list(range(40))
    only_own = [set((y[task.rank_shard(y, r, 2, 1.0)] % 2).tolist()) for r in range(2)]
    assert only_own == [{0}, {1}]
    assert task.rank_shard(y, 1, 2, 0.0).tolist() == list(range(1, 40, 2))


def test_rank_batches_cover_the_shard_and_reshuffle():
    x, y, xe, ye = task.make_data(2, per_rank=64, eval_n=16)
    assert len(x) == 128 and len(xe) == 16
    batches = list(task.rank_batches(x, y, 0, 2, batch=32, steps=4))
    assert [len(b[1]) for b in batches] == [32] * 4
    epoch0 = torch.cat([b[0] for b in batches[:2]])
    epoch1 = torch.cat([b[0] for b in batches[2:]])
    shard = x[task.rank_shard(y, 0, 2)]
    key = lambda t: sorted(map(tuple, t.tolist()))  # noqa: E731
    assert key(epoch0) == key(epoch1) == key(shard)  # each epoch sees the whole shard once
    assert not torch.equal(epoch0, epoch1)  # in another order


def test_errors_say_what_to_do():
    with pytest.raises(ValueError, match="skew"):
        task.rank_shard(torch.zeros(4, dtype=torch.long), 0, 2, skew=2.0)
    with pytest.raises(ValueError, match="optimizer='lion'"):
        task.make_optimizer("lion", task.make_model().parameters())
    assert task.make_optimizer("momentum", task.make_model().parameters()).defaults["momentum"] == 0.9


def test_default_lr_is_what_make_optimizer_uses():
    for name in task.OPTIMIZERS:
        opt = task.make_optimizer(name, [torch.nn.Parameter(torch.zeros(2))])
        assert opt.param_groups[0]["lr"] == task.default_lr(name)
    assert task.default_lr("sgd") != task.default_lr("adam")
    with pytest.raises(ValueError, match="optimizer='lamb'"):
        task.default_lr("lamb")


def test_once_reads_no_sample_twice():
    x, y, _, _ = task.make_data(2, per_rank=64)
    seen = torch.cat([xb for xb, _ in task.rank_batches(x, y, 0, 2, batch=8, steps=4, once=True)])
    assert len({tuple(r.tolist()) for r in seen}) == len(seen) == 32
    with pytest.raises(ValueError, match="fewer than steps"):
        list(task.rank_batches(x, y, 0, 2, batch=8, steps=40, once=True))
