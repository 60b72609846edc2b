"""Lab 0's graders: a right answer passes, the plausible wrong one fails with ✗, a stub is 'not attempted'."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from lab_utils.checks import NOT_ATTEMPTED
from lab_utils.labs.lab00_setup import exercises
from tests.helpers.grading import graded_fail

pytestmark = pytest.mark.slow


def mean_right(x):
    dist.all_reduce(x)
    return x / dist.get_world_size()


def mean_forgets_division(x):  # DDP without the average: the gradient is world_size times too large
    dist.all_reduce(x)
    return x


def seed_right(my_seed):
    t = torch.tensor([my_seed])
    dist.broadcast(t, src=0)
    return int(t.item())


def seed_own(my_seed):  # no collective: every rank keeps its own seed
    return my_seed


def mean_by_three(x):  # the world size the text names, hard-coded
    dist.all_reduce(x)
    return x / 3


def mean_zero_d(x):  # a tensor, but not x's shape
    dist.all_reduce(x)
    return (x / dist.get_world_size()).mean()


def seed_through_float(my_seed):  # a float32 tensor: exact below 2**24 only
    t = torch.tensor([float(my_seed)])
    dist.broadcast(t, src=0)
    return int(t.item())


def gather_by_three(me):
    everyone = [None] * 3
    dist.all_gather_object(everyone, me)
    return everyone


def gather_right(me):
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, me)
    return everyone


def gather_only_self(me):
    return [me]


def stub(*_):
    raise NotImplementedError()


@pytest.mark.parametrize(
    ("grade", "right", "wrong", "message"),
    [
        (exercises.check_mean, mean_right, mean_forgets_division, "the mean is"),
        (exercises.check_broadcast, seed_right, seed_own, "rank 0's seed"),
        (exercises.check_gather, gather_right, gather_only_self, "sees ranks"),
        (exercises.check_mean, mean_right, mean_by_three, "2 ranks: .*the mean is"),
        (exercises.check_mean, mean_right, mean_zero_d, r"a tensor of shape \(\), not \(3,\) like x"),
        (exercises.check_broadcast, seed_right, seed_through_float, "came back changed; a float32 tensor"),
        (exercises.check_gather, gather_right, gather_by_three, "2 ranks: "),
    ],
)
def test_grader_fails_the_wrong_answer(grade, right, wrong, message, no_orphans):
    # (the right answers pass in the solved lab: tests/notebooks/solved_cells.py)
    graded_fail(grade, wrong, match=f"✗ .*{message}.*\n  hint: reread")


@pytest.mark.parametrize("grade", [exercises.check_mean, exercises.check_broadcast, exercises.check_gather])
def test_ellipsis_is_not_attempted(grade, capsys):
    assert grade(...) == NOT_ATTEMPTED
    out = capsys.readouterr().out
    assert out.count("not attempted yet") == 1 and "✓" not in out
    assert "dist." not in out  # the ○ line names no call of the answer before any attempt


def test_stub_raising_inside_the_ranks_is_not_attempted(no_orphans, capsys):
    assert exercises.check_mean(stub) == NOT_ATTEMPTED
    assert "not attempted yet" in capsys.readouterr().out
