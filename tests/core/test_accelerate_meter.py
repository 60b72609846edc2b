"""accelerate_meter on lab 4's own cells: the Trainer and the Accelerate loop agree, and what Accelerate
does on 2 ranks, with accumulate() and with the guide's hand-synced loop."""

from __future__ import annotations

import pytest
from accelerate import Accelerator

from lab_utils import accelerate_meter, launch
from lab_utils.labs.lab04_hf import data, trainer
from tests.helpers.lab04_cells import TINY, lab_functions
from tests.helpers.ranks import cuda_count

two_procs = pytest.mark.skipif(cuda_count() == 1, reason="needs 0 or >= 2 GPUs for 2 ranks")
LAB = lab_functions("train_with_trainer", "evaluate", "accelerate_loop", "hand_synced_loop")


def test_trainer_and_accelerate_loop_agree():
    train_ds, val_ds = data.make_splits(32, 16)
    with accelerate_meter.fresh_accelerate(), trainer.TrainerMeter() as tm:
        t = LAB["train_with_trainer"](train_ds, val_ds, epochs=1, lr=1e-3, **TINY)
    with accelerate_meter.fresh_accelerate(), accelerate_meter.LoopMeter() as lm:
        a = LAB["accelerate_loop"](32, 16, 1, 1e-3, **TINY)
    rec = lm.record
    assert rec["order"] == train_ds.order and sorted(rec["order"]) == list(range(32))  # shuffled, same
    assert rec["order"] != list(range(32))
    assert len(tm.micro_losses) == 8 and trainer.loss_gap(tm.micro_losses, a["micro_losses"]) < 1e-5
    assert trainer.summary(t).lrs == pytest.approx([rec["lrs_micro"][i] for i in (0, 2, 4, 6)])
    assert trainer.summary(t).grad_norms == pytest.approx(rec["grad_norms"], rel=1e-4)  # clip_grad_norm_ seen
    assert rec["sync"] == [False, True] * 4 and rec["optimizer_steps"] == [0, 1, 1, 2, 2, 3, 3, 4]
    assert rec["backward_sync"] == rec["sync"] and rec["total_optimizer_steps"] == 4
    assert rec["scheduler_steps"] == [0, 1, 1, 2, 2, 3, 3, 4] and rec["collectives"] == [0] * 8  # 1 process
    assert rec["num_processes"] == 1
    # the meter is gone after the block
    for name in ("accumulate", "prepare", "backward", "clip_grad_norm_"):
        assert getattr(Accelerator, name).__qualname__ == f"Accelerator.{name}"


def test_metered_needs_a_dict():
    with pytest.raises(TypeError, match="returning a dict"):
        accelerate_meter.metered(lambda: [1.0])()


@pytest.mark.slow
@two_procs
@pytest.mark.usefixtures("no_orphans")
def test_two_ranks_accumulate_and_the_hand_synced_loop():
    loops = {
        "acc": (LAB["accelerate_loop"], {}),
        "hand": (LAB["hand_synced_loop"], {}),
        "twice": (LAB["hand_synced_loop"], {"accelerator_steps": TINY["grad_accum"]}),
    }
    job = dict(n_train=32, n_val=16, epochs=1, lr=1e-3, expected_processes=2, **TINY)
    ranks = launch(accelerate_meter.metered_each(loops), 2, kwargs=job, timeout=240)
    assert [r["acc"]["num_processes"] for r in ranks] == [2, 2] and [r["acc"]["rank"] for r in ranks] == [0, 1]
    for r in ranks:
        acc, hand, twice = r["acc"], r["hand"], r["twice"]
        assert acc["sync"] == [False, True] * 2
        assert acc["collectives"] == [0, 1, 0, 1]  # the tiny model fits in one DDP bucket
        assert acc["optimizer_steps"] == [0, 1, 1, 2]
        assert acc["scheduler_steps"] == [0, 2, 2, 4]  # num_processes steps per update
        # by hand: the same all-reduces, losses and gradient norms; sync_gradients is never False
        assert hand["backward_collectives"] == acc["backward_collectives"] == [0, 1, 0, 1]
        assert hand["backward_sync"] == [True] * 4 and hand["sync"] == []  # no accumulate() to close
        assert trainer.loss_gap(hand["micro_losses"], acc["micro_losses"]) < 1e-5
        assert hand["grad_norms"] == pytest.approx(acc["grad_norms"], rel=1e-4)
        assert hand["total_optimizer_steps"] == acc["total_optimizer_steps"] == 2
        # its own division kept under Accelerator(gradient_accumulation_steps=2): divided twice
        assert twice["grad_norms"] == pytest.approx([g / TINY["grad_accum"] for g in hand["grad_norms"]], rel=1e-4)
    assert sorted(ranks[0]["acc"]["order"] + ranks[1]["acc"]["order"]) == list(range(32))  # disjoint shards
