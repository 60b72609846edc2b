"""study: seeds stacked into one model train exactly as they would alone; comparisons pair the
seeds (a sign test), so overlapping spreads can still rank."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lab_utils.labs.lab05_local_sgd import study, task


def plain(model, opt, batches, log, scale=1.0):
    for xb, yb in batches:
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad()
        (scale * loss).backward()
        opt.step()
        log(loss)


def test_stacked_seeds_equal_separate_runs():
    for optimizer in ("sgd", "adamw"):  # elementwise updates, with and without state
        both = study.run_seeds(plain, steps=6, seeds=(0, 3), optimizer=optimizer, evals=2)
        alone = [study.run_seeds(plain, steps=6, seeds=(s,), optimizer=optimizer, evals=2) for s in (0, 3)]
        assert [s for s, _ in both.curve] == [3, 6]
        assert both.final == pytest.approx([a.final[0] for a in alone], abs=1e-5)
        assert both.final[0] != pytest.approx(both.final[1], abs=1e-3)  # the seeds really differ
    # a gradient twice too large (the loss not divided by the seeds) changes plain SGD's result
    wrong = study.run_seeds(plain, steps=6, seeds=(0, 3), optimizer="sgd", evals=2, scale=2.0)
    sgd = study.run_seeds(plain, steps=6, seeds=(0, 3), optimizer="sgd", evals=2)
    assert wrong.final != pytest.approx(sgd.final, abs=1e-4)


def test_stack_is_the_lab_model():
    models = [task.make_model(seed=s) for s in (0, 1)]
    stack = study.SeedStack(models)
    x = torch.randn(2, 5, task.TASK["dim"])
    out = stack(x)
    assert out.shape == (2, task.TASK["classes"], 5)
    for i, m in enumerate(models):
        torch.testing.assert_close(out[i].T, m(x[i]), atol=1e-5, rtol=1e-5)
    with pytest.raises(TypeError, match="BatchNorm1d"):
        study.SeedStack([task.make_model(batchnorm=True)])


def test_spread_and_pairing():
    assert study.spread([3.0, 1.0, 2.0]) == (3.0, 2.0, 1.0)
    a, b = [1.0, 2.0, 3.0, 4.0, 5.0], [1.1, 2.1, 3.1, 4.1, 5.1]  # spreads overlap; A wins every seed
    assert study.sign_test(a, b).wins == 5


def test_run_seeds_errors():
    with pytest.raises(ValueError, match="steps=0"):
        study.run_seeds(plain, steps=0)
    with pytest.raises(RuntimeError, match="once a step"):
        study.run_seeds(lambda model, opt, batches, log: None, steps=2)


def test_sign_test_counts_wins_and_gives_the_binomial_p():
    assert study.sign_test([1, 1, 1, 1, 1, 1, 1, 1], [2] * 8) == study.SignTest(8, 8, 2 / 256)
    t = study.sign_test([1, 1, 1, 1, 1, 1, 1, 3], [2] * 8)
    assert (t.wins, t.n) == (7, 8) and abs(t.p - 2 * 9 / 256) < 1e-12
    assert study.sign_test([3] * 5, [2] * 5).wins == 0 and abs(study.sign_test([3] * 5, [2] * 5).p - 1 / 16) < 1e-12
    assert study.sign_test([1, 2, 1], [2, 2, 2]) == study.SignTest(2, 2, 0.5)  # the tie is dropped
    assert str(study.SignTest(8, 8, 2 / 256)) == "8 of 8 seeds (sign test p = 0.0078)"
    with pytest.raises(ValueError, match="one value per seed"):
        study.sign_test([1], [1, 2])
