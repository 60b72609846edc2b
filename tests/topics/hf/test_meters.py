"""hf.meters: the Trainer and the Accelerate loop agree, and what Accelerate does on 2 ranks."""

from __future__ import annotations

import pytest
from accelerate import Accelerator

from lab_utils import launch
from lab_utils.topics.hf import guards, meters, trainer
from tests.conftest import cuda_count
from tests.topics.hf.jobs import TINY, accelerate_loop, train_with_trainer

two_procs = pytest.mark.skipif(cuda_count() == 1, reason="needs 0 or >= 2 GPUs for 2 ranks")


def test_window_means_and_loss_gap():
    assert meters.window_means([1.0, 3.0, 5.0, 7.0, 9.0], 2) == [2.0, 6.0, 9.0]
    assert meters.loss_gap([1.0, 2.0], [1.5, 2.0]) == 0.5
    with pytest.raises(ValueError, match="not the same job"):
        meters.loss_gap([1.0], [1.0, 2.0])


def test_trainer_and_accelerate_loop_agree():
    with trainer.TrainerMeter() as tm:
        t, t_ds = train_with_trainer(**TINY)
    guards.reset_accelerate_state()
    with meters.LoopMeter() as lm:
        a = accelerate_loop(**TINY)
    guards.reset_accelerate_state()
    rec = lm.record
    assert rec["order"] == t_ds.order and sorted(rec["order"]) == list(range(32))  # shuffled, same
    assert rec["order"] != list(range(32))
    assert len(tm.micro_losses) == 8 and meters.loss_gap(tm.micro_losses, a["micro_losses"]) < 1e-5
    assert trainer.summary(t)["lrs"] == pytest.approx([rec["lrs_micro"][i] for i in (0, 2, 4, 6)])
    assert rec["sync"] == [False, True] * 4 and rec["optimizer_steps"] == [0, 1, 1, 2, 2, 3, 3, 4]
    assert rec["scheduler_steps"] == [0, 1, 1, 2, 2, 3, 3, 4] and rec["collectives"] == [0] * 8  # 1 process
    assert rec["num_processes"] == 1
    # the meter is gone after the block
    assert Accelerator.accumulate.__qualname__ == "Accelerator.accumulate"
    assert Accelerator.prepare.__qualname__ == "Accelerator.prepare"


def test_metered_needs_a_dict():
    with pytest.raises(TypeError, match="returning a dict"):
        meters.metered(lambda: [1.0])()


@pytest.mark.slow
@two_procs
@pytest.mark.usefixtures("no_orphans")
def test_two_ranks_sync_only_on_sync_steps():
    job = dict(TINY, expected_processes=2)
    ranks = launch(meters.metered(accelerate_loop), 2, kwargs=job, timeout=240)
    assert [r["num_processes"] for r in ranks] == [2, 2] and [r["rank"] for r in ranks] == [0, 1]
    for r in ranks:
        assert r["sync"] == [False, True] * 2
        assert r["collectives"] == [0, 1, 0, 1]  # the tiny model fits in one DDP bucket
        assert r["optimizer_steps"] == [0, 1, 1, 2]
        assert r["scheduler_steps"] == [0, 2, 2, 4]  # num_processes steps per update
    assert sorted(ranks[0]["order"] + ranks[1]["order"]) == list(range(32))  # disjoint shards
