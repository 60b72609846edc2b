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


def every_rank_saves_the_wrapper(checkpoint_path):  # the student's: no `if rank == 0`, model.state_dict()
    dist.init_process_group("gloo")
    model = DDP(script_model())
    dataset = TensorDataset(*script_data())
    sampler = DistributedSampler(dataset, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=MICRO_BATCH, sampler=sampler)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        for i, (xb, yb) in enumerate(loader):
            step_now = (i + 1) % K_SCRIPT == 0
            with model.no_sync() if not step_now else torch.enable_grad():
                (F.mse_loss(model(xb), yb) / K_SCRIPT).backward()
            if step_now:
                optimizer.step()
                optimizer.zero_grad()
    torch.save(model.state_dict(), checkpoint_path)
    dist.destroy_process_group()


@pytest.mark.slow
def test_a_script_where_every_rank_saves_is_caught_by_the_probe():
    run = ex.run_script(every_rank_saves_the_wrapper)
    assert [r["saves"] for r in run.ranks] == [1, 1] and run.checkpoint_keys[0].startswith("module.")
    with pytest.raises(AssertionError, match=r"ranks \[0, 1\] called torch.save"):
        ex.judge(run)
    run.ranks[1]["saves"] = 0  # rank 0 alone, but the wrapper's keys: strict loading refuses them
    with pytest.raises(AssertionError, match="start with 'module.'"):
        ex.judge(run)


@pytest.mark.slow
def test_a_script_without_set_epoch_is_caught_on_its_ranks(tmp_path):
    script = ex.write_script(without_set_epoch, tmp_path / "s.py")
    assert "torchrun --standalone --nproc_per_node=2 s.py" in script.read_text()
    graded_fail(ex.check_script, without_set_epoch, match="same sample order in every epoch.*set_epoch")


def _run(all_reduces=STEPS, steps=STEPS, orders=((1, 2), (2, 1)), params=None, saves=(1, 0), keys=None):
    recs = [{"rank": r, "all_reduces": all_reduces, "steps": steps, "orders": [list(o) for o in orders], "saves": n}
            for r, n in enumerate(saves)]  # fmt: skip
    keys = [k for k, _ in script_model().named_parameters()] if keys is None else keys
    return ex.ScriptRun(0, "", recs, ex.script_reference() if params is None else params, keys)


def test_judge_names_each_mistake():
    import pytest

    with pytest.raises(AssertionError, match="8 all-reduces for 4 optimizer steps.*no_sync"):
        ex.judge(_run(all_reduces=2 * STEPS))  # the forward outside no_sync: K all-reduces per step
    with pytest.raises(AssertionError, match="took 8 optimizer steps"):
        ex.judge(_run(steps=8))  # a step per micro-batch
    with pytest.raises(AssertionError, match="divided by K_SCRIPT"):
        ex.judge(_run(params=ex.script_reference() + 1e-3))
    with pytest.raises(AssertionError, match="saved no checkpoint"):
        ex.judge(ex.ScriptRun(0, "", _run(saves=(0, 0)).ranks))
    with pytest.raises(AssertionError, match=r"ranks \[0, 1\] called torch.save: only rank 0"):
        ex.judge(_run(saves=(1, 1)))  # no `if rank == 0`: every rank writes the file
    prefixed = _run(keys=["module.0.weight", "module.0.bias"])
    prefixed.params = None  # what run_script leaves when strict loading fails
    with pytest.raises(AssertionError, match="start with 'module.'.*model.module.state_dict()"):
        ex.judge(prefixed)
    with pytest.raises(AssertionError, match="copies only this function.*define any helper inside it"):
        ex.judge(ex.ScriptRun(1, "[rank0]: NameError: name '_one_step' is not defined"))
    with pytest.raises(AssertionError, match="exited with 1"):
        ex.judge(ex.ScriptRun(1, "Traceback ... RuntimeError: boom"))
    assert "a new order each epoch" in ex.judge(_run())


def test_the_stub_is_not_attempted():
    def ddp_script(checkpoint_path):
        raise NotImplementedError()

    assert ex.check_script(ddp_script) == NOT_ATTEMPTED
