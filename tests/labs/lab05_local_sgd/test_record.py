"""record.run on real ranks: counted bytes against hand-computed sizes, fingerprints equal exactly
after an averaging, the recorder's own traffic not counted, the same function under torchrun."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from lab_utils.flat import mean_over_ranks
from lab_utils.labs.lab05_local_sgd import record
from lab_utils.launcher import launch

pytestmark = pytest.mark.usefixtures("no_orphans")
STEPS = 32
PBYTES = 11_082 * 4


def per_tensor(model):
    for p in model.parameters():
        dist.all_reduce(p.data)
        p.data /= dist.get_world_size()


def train_local(model, opt, batches, log, H, average=per_tensor):
    for step, (xb, yb) in enumerate(batches):
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if (step + 1) % H == 0:
            average(model)
        log(loss)


def train_ddp(model, opt, batches, log):
    net = log.watch(DDP(model))
    for xb, yb in batches:
        loss = F.cross_entropy(net(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        log(loss)
    del net


def average_flat(model):
    mean_over_ranks(model.parameters())  # one flat all_reduce


def flat_with_exit(model, opt, batches, log, H):
    done = 0
    for xb, yb in batches:
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        done += 1
        if done % H == 0:
            average_flat(model)
        log(loss)
    if done % H:
        average_flat(model)


def forgets_to_log(model, opt, batches, log):
    for _ in batches:
        pass


def all_runs():
    return {
        "DDP": record.run(train_ddp, steps=STEPS),
        "H=1": record.run(train_local, steps=STEPS, H=1),
        "H=4": record.run(train_local, steps=STEPS, H=4, spread=True),
        "H=4 flat": record.run(train_local, steps=STEPS, H=4, average=average_flat),
        "H=5 flat": record.run(flat_with_exit, steps=STEPS, H=5),
        "adam DDP": record.run(train_ddp, steps=STEPS, optimizer="adam"),
        "adam H=1": record.run(train_local, steps=STEPS, H=1, optimizer="adam"),
    }


@pytest.fixture(scope="module")
def runs():
    return record.gather(launch(all_runs, 2, timeout=300))


def test_bytes_are_one_over_h_of_ddp_and_match_the_model_size(runs):
    assert runs["DDP"].param_bytes == PBYTES
    assert runs["DDP"].comm["bytes"] == STEPS * PBYTES  # one gradient of every param per step, eval not counted
    assert runs["H=4"].comm["bytes"] * 4 == runs["DDP"].comm["bytes"]
    # per tensor (4 Linear weights and biases) vs one flat buffer: same bytes, 8x the collectives
    assert runs["H=4"].comm["collectives"] == 8 * runs["H=4 flat"].comm["collectives"] == 8 * STEPS // 4
    assert runs["H=4"].comm["bytes"] == runs["H=4 flat"].comm["bytes"]


def test_parameters_equal_after_averaging_and_differ_between(runs):
    r = runs["H=4"]
    assert r.synced_steps == list(range(3, STEPS, 4))
    per_step = list(zip(*r.rank_fingerprints))
    for s, prints in enumerate(per_step):
        assert (prints[0] == prints[1]) == (s in r.synced_steps), s
    assert all((d == 0.0) == (s in r.synced_steps) for s, d in enumerate(r.drift))


def test_exit_averaging_when_steps_not_a_multiple_of_h(runs):
    r = runs["H=5 flat"]
    assert r.synced_steps == [4, 9, 14, 19, 24, 29, STEPS]  # the last one after the last step
    assert r.rank_fingerprints[0][-1] != r.rank_fingerprints[1][-1]  # after step 31, not yet equal
    assert torch.equal(r.rank_params[0], r.rank_params[1])  # equal at the end
    assert r.comm["bytes"] == 7 * PBYTES and r.comm["collectives"] == 7


def test_h1_equals_ddp_with_sgd_not_with_adam(runs):
    assert (runs["H=1"].params - runs["DDP"].params).abs().max() < 1e-5
    assert (runs["adam H=1"].params - runs["adam DDP"].params).abs().max() > 1e-3
    assert len(set(runs["adam H=1"].rank_opt_state)) == 2  # the optimizer state is never communicated
    assert len(set(runs["adam DDP"].rank_opt_state)) == 1


def test_record_keeps_curves(runs):
    r = runs["H=4"]
    assert [s for s, _ in r.eval_curve] == list(range(2, STEPS + 1, 2))  # every steps // 16
    assert len(r.losses) == len(r.step_s) == STEPS
    assert r.eval_curve[-1][1] < r.eval_curve[0][1]  # it learns


def _forgets():
    return record.run(forgets_to_log, steps=4)


def test_errors_say_what_to_do():
    with pytest.raises(RuntimeError, match=r"lab_utils\.launch\(fn"):
        record.run(train_ddp, steps=4)
    with pytest.raises(Exception, match="log\\(loss\\) 0 times"):
        launch(_forgets, 2, timeout=120)
