"""ddp-script's grader: the student's script written out, run under torchrun, judged on its ranks.

One real torchrun (a script that forgets set_epoch: the probe must see the repeated order); the
judge's other verdicts on records of the shape the probe writes. The solution passes in the
solved lab (tests/notebooks/solved_cells.py)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from lab_utils.checks import NOT_ATTEMPTED
from lab_utils.labs.lab03_ddp import exercises as ex
from lab_utils.labs.lab03_ddp.exercises import EPOCHS, K_SCRIPT, LR, MICRO_BATCH, script_data, script_model
from tests.helpers.grading import graded_fail

STEPS = ex.EPOCHS * ex.UPDATES_PER_EPOCH


def without_set_epoch(checkpoint_path):  # uses only the names the written script defines
    dist.init_process_group("gloo")
    model = DDP(script_model())
    dataset = TensorDataset(*script_data())
    sampler = DistributedSampler(dataset, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=MICRO_BATCH, sampler=sampler)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    for _epoch in range(EPOCHS):  # no sampler.set_epoch(epoch): the same order every epoch
        for i, (xb, yb) in enumerate(loader):
            (F.mse_loss(model(xb), yb) / K_SCRIPT).backward()
            if (i + 1) % K_SCRIPT == 0:
                optimizer.step()
                optimizer.zero_grad()
    if dist.get_rank() == 0:
        torch.save(model.module.state_dict(), checkpoint_path)
    dist.destroy_process_group()


@pytest.mark.slow
def test_a_script_without_set_epoch_is_caught_on_its_ranks(tmp_path):
    script = ex.write_script(without_set_epoch, tmp_path / "s.py")
    assert "torchrun --standalone --nproc_per_node=2 s.py" in script.read_text()
    graded_fail(ex.check_script, without_set_epoch, match="same sample order in every epoch.*set_epoch")


def _run(all_reduces=STEPS, steps=STEPS, orders=((1, 2), (2, 1)), params=None):
    rec = {"all_reduces": all_reduces, "steps": steps, "orders": [list(o) for o in orders]}
    return ex.ScriptRun(0, "", [rec, dict(rec)], ex.script_reference() if params is None else params)


def test_judge_names_each_mistake():
    import pytest

    with pytest.raises(AssertionError, match="8 all-reduces for 4 optimizer steps.*no_sync"):
        ex.judge(_run(all_reduces=2 * STEPS))  # the forward outside no_sync: K all-reduces per step
    with pytest.raises(AssertionError, match="took 8 optimizer steps"):
        ex.judge(_run(steps=8))  # a step per micro-batch
    with pytest.raises(AssertionError, match="divided by K_SCRIPT"):
        ex.judge(_run(params=ex.script_reference() + 1e-3))
    missing = _run()
    missing.params = None
    with pytest.raises(AssertionError, match="saved no checkpoint"):
        ex.judge(missing)
    with pytest.raises(AssertionError, match="exited with 1"):
        ex.judge(ex.ScriptRun(1, "Traceback ... RuntimeError: boom"))
    assert "a new order each epoch" in ex.judge(_run())


def test_the_stub_is_not_attempted():
    def ddp_script(checkpoint_path):
        raise NotImplementedError()

    assert ex.check_script(ddp_script) == NOT_ATTEMPTED
