"""Accelerate's LocalSGD, counted from outside: the averaging schedule it really follows, no
gradient sync inside the block, buffers not averaged, silently off in a single process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types

import pytest
import torch
import torch.nn.functional as F
from accelerate import DistributedType
from accelerate.local_sgd import LocalSGD

from lab_utils.labs.lab05_local_sgd import run_accelerate
from lab_utils.launcher import launch
from tests.labs.lab05_local_sgd.loops import after_the_block_loop, guide_loop
from tools.solutions import solution

pytestmark = pytest.mark.usefixtures("no_orphans")
PBYTES = 11_082 * 4


def accumulation_loop(accelerator, model, optimizer, scheduler, dataloader):
    for inputs, targets in dataloader:
        with accelerator.accumulate(model):
            accelerator.backward(F.cross_entropy(model(inputs), targets))
            optimizer.step()
            optimizer.zero_grad()


# exercise 2's answer: LocalSGD stepped once per optimizer update
update_loop = solution("05_local_sgd", "lsgd-update-loop", {"LocalSGD": LocalSGD, "F": F})["update_loop"]
ACC = {  # name: (loop, settings)
    "guide": (guide_loop, dict(local_sgd_steps=8)),
    "trap": (guide_loop, dict(local_sgd_steps=3)),
    "update": (update_loop, dict(local_sgd_steps=3)),
    "after the block": (after_the_block_loop, dict(local_sgd_steps=3)),
    "bn": (guide_loop, dict(local_sgd_steps=8, batchnorm=True)),
}


def all_runs():
    out = {name: run_accelerate(loop, accumulation=2, **cfg) for name, (loop, cfg) in ACC.items()}
    out["plain"] = run_accelerate(accumulation_loop, accumulation=2)
    return out


@pytest.fixture(scope="module")
def acc():
    return launch(all_runs, 2, timeout=300)


def expected_averagings(calls_per_micro: bool, k: int, accumulation: int, n: int = 32):
    """(micro-batch index, on an update boundary) of each averaging, from LocalSGD's rule."""
    if calls_per_micro:
        at = [m for m in range(n) if (m + 1) % k == 0]
    else:
        at = [m for m in range(n) if (m + 1) % accumulation == 0 and ((m + 1) // accumulation) % k == 0]
    return [(m, (m + 1) % accumulation == 0) for m in at] + [(n, True)]


@pytest.mark.parametrize("name", ["guide", "trap", "update"])
def test_accelerate_averaging_schedule(acc, name):
    r, (loop, cfg) = acc[0][name], ACC[name]
    want = expected_averagings(loop is guide_loop, cfg["local_sgd_steps"], 2)
    assert [(a.micro_batch, a.on_update_boundary) for a in r.averagings] == want
    assert r.num_processes == 2 and r.micro_batches == 32 and r.updates == 16
    # updates done when each averaging ran: counted from the order of events, as the filing says
    assert [a.updates for a in r.averagings] == [sum(r.sync_flags[: m + 1]) for m, _ in want]
    assert not [e for e in r.events if e.source == "ddp-hook"]  # no gradient sync
    direct = [e for e in r.events if e.source == "torch.distributed" and e.op != "barrier"]
    assert len(direct) == 8 * len(want)  # one per tensor
    # wait_for_everyone() before every averaging: one barrier of the 2 ranks, in the same step
    assert r.barriers == [a.micro_batch for a in r.averagings]
    assert {e.group_size for e in r.events} == {2}
    assert sum(e.nbytes for e in direct) == len(want) * PBYTES
    assert acc[0][name].param_fingerprint == acc[1][name].param_fingerprint


def test_an_averaging_after_the_accumulate_block_is_filed_under_the_next_micro_batch(acc):
    """The same averagings as the solution's (after updates 3, 6, ..., 15 and at exit), each on an
    update boundary, though the meter files each under the micro-batch after its update."""
    r, update = acc[0]["after the block"], acc[0]["update"]
    assert [a.updates for a in r.averagings] == [a.updates for a in update.averagings] == [3, 6, 9, 12, 15, 16]
    assert all(a.on_update_boundary for a in r.averagings)
    assert [a.micro_batch for a in r.averagings][:-1] == [a.micro_batch + 1 for a in update.averagings][:-1]
    assert r.param_fingerprint == update.param_fingerprint


def test_accelerate_without_local_sgd_syncs_once_per_update(acc):
    r = acc[0]["plain"]
    hooks = [e for e in r.events if e.source == "ddp-hook"]
    assert r.updates == 16 and len(hooks) == 16
    assert sum(e.nbytes for e in hooks) == 16 * PBYTES
    assert r.averagings == []


def test_accelerate_does_not_average_buffers(acc):
    a, b = acc[0]["bn"], acc[1]["bn"]
    assert a.param_fingerprint == b.param_fingerprint
    assert a.buffer_fingerprint != b.buffer_fingerprint


def test_local_sgd_refuses_deepspeed():
    with pytest.raises(NotImplementedError, match="DeepSpeed"):
        LocalSGD(
            accelerator=types.SimpleNamespace(distributed_type=DistributedType.DEEPSPEED),
            model=torch.nn.Linear(2, 2),
            local_sgd_steps=4,
        )


def test_single_process_is_silently_disabled():
    # In a fresh interpreter, so this process keeps no Accelerator state.
    code = (
        "import json; from lab_utils.labs.lab05_local_sgd import run_accelerate; "
        "from tests.labs.lab05_local_sgd.loops import guide_loop; "
        "r = run_accelerate(guide_loop, local_sgd_steps=4); "
        "print(json.dumps([r.num_processes, r.updates, len(r.events)]))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=180,
        env={k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [1, 16, 0]


def test_errors_say_what_to_do():
    with pytest.raises(ValueError, match="accumulation=0"):
        run_accelerate(guide_loop, accumulation=0)
