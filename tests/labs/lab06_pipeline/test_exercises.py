"""The graders of lab 6 on wrong code (the bug each exercise is about) and on the stubs."""

from __future__ import annotations

import functools
import itertools

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from lab_utils.checks import FAILED, NOT_ATTEMPTED, PASSED
from lab_utils.labs.lab06_pipeline import exercises, stages
from tests.helpers.grading import graded_fail


def stage_forward(stage, x, t, divide_by, send=None):
    """One micro-batch through this rank's stage: received from the stage before (after stage 0),
    then sent on (``send``, by default dist.send looked up now, as the grader's counter wraps it),
    or turned into the loss / ``divide_by`` on the last stage; -> (input, output)."""
    rank, p, send = dist.get_rank(), dist.get_world_size(), send or dist.send
    if rank > 0:
        x = torch.empty_like(x)
        dist.recv(x, src=rank - 1)
        x.requires_grad_()
    y = stage(x)
    if rank == p - 1:
        y = F.mse_loss(y, t) / divide_by
    else:
        send(y.detach(), dst=rank + 1)
    return x, y


def stage_backward(x, y, send=None):
    """The backward of one micro-batch: its output's gradient from the stage after (the loss on the
    last stage), then its input's gradient sent to the stage before."""
    rank, p, send = dist.get_rank(), dist.get_world_size(), send or dist.send
    if rank == p - 1:
        y.backward()
    else:
        g = torch.empty_like(y)
        dist.recv(g, src=rank + 1)
        y.backward(g)
    if rank > 0:
        send(x.grad, dst=rank - 1)


def forgets_1_over_m(stage, inputs, targets):
    """A correct p-stage fill-drain, except the loss: the sum of micro-batch means, m times too big."""
    done = [stage_forward(stage, x, t, divide_by=1) for x, t in zip(inputs, targets)]
    for x, y in done:
        stage_backward(x, y)


def one_f_one_b(stage, inputs, targets):
    """Right gradients and messages, 1F1B's order: each backward as soon as its gradient can come."""
    rank, p, m = dist.get_rank(), dist.get_world_size(), len(inputs)
    pending, sends = [], []

    def isend(t, dst):  # blocking sends would deadlock 1F1B
        sends.append(dist.isend(t, dst=dst))

    def forward(i):
        pending.append(stage_forward(stage, inputs[i], targets[i], divide_by=m, send=isend))

    def backward():
        stage_backward(*pending.pop(0), send=isend)

    warm = min(p - 1 - rank, m)
    for i in range(warm):
        forward(i)
    for i in range(warm, m):
        forward(i)
        backward()
    while pending:
        backward()
    for work in sends:
        work.wait()


def middle_keeps_it(stage, inputs, targets):
    """Written for 2 stages: every stage after the first receives, then computes the loss; so the
    middle stage never sends and the last waits for it."""
    rank, m = dist.get_rank(), len(inputs)
    received, losses = [], []
    for x, t in zip(inputs, targets):
        if rank > 0:
            x = torch.empty_like(x)
            dist.recv(x, src=rank - 1)
            x.requires_grad_()
            losses.append(F.mse_loss(stage(x), t) / m)
        else:
            y = stage(x)
            dist.send(y.detach(), dst=1)
            losses.append(y)
        received.append(x)
    for x, y in zip(received, losses):
        if rank == 0:
            g = torch.empty_like(y)
            dist.recv(g, src=1)
            y.backward(g)
        else:
            y.backward()
            dist.send(x.grad, dst=rank - 1)


def reverse_drain(stage, inputs, targets):
    """A fill-drain whose drain runs the last micro-batch first: the same gradient, bubble and memory."""
    done = [stage_forward(stage, x, t, divide_by=len(inputs)) for x, t in zip(inputs, targets)]
    for x, y in reversed(done):
        stage_backward(x, y)


def summed_loss(stage, inputs, targets):
    """Right gradients and messages, but the last stage runs ONE backward, of the summed losses."""
    rank, p = dist.get_rank(), dist.get_world_size()
    done = [stage_forward(stage, x, t, divide_by=len(inputs)) for x, t in zip(inputs, targets)]
    if rank < p - 1:
        for x, y in done:
            stage_backward(x, y)
        return
    sum(y for _, y in done).backward()
    for x, _ in done:
        dist.send(x.grad, dst=rank - 1)


def three_stages_only(stage, inputs, targets):
    """Right on 3 ranks only: rank 1 is THE middle stage and rank 2 computes the loss, whatever p is."""
    rank, m = dist.get_rank(), len(inputs)
    ins, outs = [], []
    for x, t in zip(inputs, targets):
        if rank > 0:
            x = torch.empty_like(x)
            dist.recv(x, src=rank - 1)
            x.requires_grad_()
        y = stage(x)
        if rank == 2:
            y = F.mse_loss(y, t) / m
        else:
            dist.send(y.detach(), dst=rank + 1)
        ins.append(x)
        outs.append(y)
    for x, y in zip(ins, outs):
        if rank == 2:
            y.backward()
        else:
            g = torch.empty_like(y)
            dist.recv(g, src=rank + 1)
            y.backward(g)
        if rank > 0:
            dist.send(x.grad, dst=rank - 1)


def stub_step(stage, inputs, targets):
    raise NotImplementedError()


def bubble_only(p, batch, bytes_per_sample, budget, max_bubble):
    """Forgets the memory budget: the smallest m (>= p) for the bubble alone."""
    return next(m for m in range(p, batch + 1) if batch % m == 0 and (p - 1) / (m + p - 1) <= max_bubble)


def from_one(p, batch, bytes_per_sample, budget, max_bubble):
    """Forgets that 1F1B needs m >= p: starts at m = 1."""
    for m in range(1, batch + 1):
        if (
            batch % m == 0
            and (p - 1) / (m + p - 1) <= max_bubble
            and min(m, p) * batch // m * bytes_per_sample <= budget
        ):
            return m
    return None


def strict_budget(p, batch, bytes_per_sample, budget, max_bubble):
    """Right, except that an m filling the budget exactly (m = p, the whole batch in flight) is refused."""
    for m in range(p, batch + 1):
        if (
            batch % m == 0
            and (p - 1) / (m + p - 1) <= max_bubble
            and min(m, p) * batch // m * bytes_per_sample < budget
        ):
            return m
    return None


def strict_bubble(p, batch, bytes_per_sample, budget, max_bubble):
    """Reads "at most max_bubble" as "below": refuses an m whose bubble equals the limit."""
    for m in range(p, batch + 1):
        if (
            batch % m == 0
            and (p - 1) / (m + p - 1) < max_bubble
            and min(m, p) * batch // m * bytes_per_sample <= budget
        ):
            return m
    return None


def gpipe_memory(p, batch, bytes_per_sample, budget, max_bubble):
    """Counts GPipe's activations (all m micro-batches = the whole batch) instead of 1F1B's."""
    for m in range(p, batch + 1):
        if batch % m == 0 and (p - 1) / (m + p - 1) <= max_bubble and batch * bytes_per_sample <= budget:
            return m
    return None


def even_split(costs, p):
    """Equal numbers of blocks per stage, whatever they cost."""
    sizes = stages.stage_sizes(len(costs), p)
    return [sum(sizes[:i]) for i in range(1, p)]


def _by_stage_sums(score):
    """A splitter trying every place for the boundaries and keeping the one whose stage sums score lowest."""

    def split(costs, p):
        def sums(cuts):
            edges = [0, *cuts, len(costs)]
            return [sum(costs[a:b]) for a, b in itertools.pairwise(edges)]

        return list(min(itertools.combinations(range(1, len(costs)), p - 1), key=lambda c: score(sums(c))))

    return split


smallest_spread = _by_stage_sums(lambda s: max(s) - min(s))  # the stages as alike as possible
smallest_squares = _by_stage_sums(lambda s: sum(x * x for x in s))


def grow_until_overshoot(costs, p):
    """The greedy the old hint named: grow each stage until the next block would overshoot total / p."""
    target, cuts, acc = sum(costs) / p, [], 0
    for i, c in enumerate(costs):
        if acc > 0 and acc + c > target and len(cuts) < p - 1:
            cuts.append(i)
            acc = 0
        acc += c
    return cuts


def stub(*args):
    raise NotImplementedError()


@pytest.mark.slow
@pytest.mark.usefixtures("no_orphans")
def test_fill_drain_catches_the_missing_1_over_m():
    graded_fail(exercises.check_fill_drain, forgets_1_over_m, match=f"{FAILED} .*away from one large batch")


@pytest.mark.slow
@pytest.mark.usefixtures("no_orphans")
def test_fill_drain_rejects_torchs_schedule():
    """torch's ScheduleGPipe gets the same gradients, order and bytes, but is not the student's loop."""
    graded_fail(
        exercises.check_fill_drain,
        functools.partial(exercises.schedule_step, "GPipe"),
        match=f"{FAILED} .*not by your loop",
    )


@pytest.mark.slow
@pytest.mark.usefixtures("no_orphans")
def test_fill_drain_rejects_1f1b_order():
    graded_fail(
        exercises.check_fill_drain,
        one_f_one_b,
        match=f"{FAILED} .*GPipe runs every forward .*then every backward",
    )


@pytest.mark.slow
@pytest.mark.usefixtures("no_orphans")
def test_fill_drain_accepts_a_reverse_order_drain(capsys):
    assert exercises.check_fill_drain(reverse_drain) == PASSED
    out = capsys.readouterr().out
    assert "3 and 4 ranks" in out and "held for backward at the worst moment (measured live, 4 ranks)" in out


@pytest.mark.slow
@pytest.mark.usefixtures("no_orphans")
def test_fill_drain_rejects_a_middle_stage_that_does_not_send(monkeypatch):
    monkeypatch.setattr(exercises, "STALL_S", 6.0)  # 2 s misfired beside a busy machine: a slow peer
    err = graded_fail(exercises.check_fill_drain, middle_keeps_it, match=f"{FAILED} .*still waiting")
    # the hang is named: the last stage waits for activations the middle stage never sends
    assert "stage 2 is blocked in a receive from stage 1 (the activations of micro-batch 0)" in err
    assert "a middle stage must receive AND send" in err


@pytest.mark.slow
@pytest.mark.usefixtures("no_orphans")
def test_fill_drain_says_why_one_summed_backward_fails():
    graded_fail(
        exercises.check_fill_drain,
        summed_loss,
        match=f"{FAILED} .*on 3 ranks: stage 2 ran .*one backward\\(\\) per micro-batch .*1 seen, 4 expected",
    )


@pytest.mark.slow
@pytest.mark.usefixtures("no_orphans")
def test_fill_drain_catches_a_loop_written_for_3_stages(monkeypatch):
    monkeypatch.setattr(exercises, "STALL_S", 6.0)
    graded_fail(
        exercises.check_fill_drain,
        three_stages_only,
        match=f"{FAILED} .*on 4 ranks: .*still waiting .*stage 3 is blocked in a receive from stage 2",
    )


@pytest.mark.slow
@pytest.mark.usefixtures("no_orphans")
def test_fill_drain_stub_on_ranks_is_not_attempted():
    assert exercises.check_fill_drain(stub_step) == NOT_ATTEMPTED


@pytest.mark.slow
@pytest.mark.usefixtures("no_orphans")
@pytest.mark.parametrize(
    "wrong, match",
    [
        (bubble_only, "held .* on stage 0 \\(budget"),  # its m, run as 1F1B, broke the budget
        (gpipe_memory, "m=8 meets both \\(measured under 1F1B"),  # a larger m than needed, or None
        (from_one, "m=1, which torch's Schedule1F1B cannot run"),
        (strict_budget, "you chose m=4; m=2 meets both"),  # m = p fills the budget exactly
        (strict_bubble, "max_bubble=0.2: you chose m=8; m=4 meets both"),  # m=4 idles exactly 1/5
    ],
    ids=["bubble-only", "gpipe-memory", "m-from-1", "strict-budget", "strict-bubble"],
)
def test_choose_m_grades_the_measured_run(wrong, match):
    graded_fail(exercises.check_choose_m, wrong, match=f"{FAILED} .*{match}")


@pytest.mark.parametrize(
    "wrong, match",
    [
        (even_split, "the best split leaves"),
        (grow_until_overshoot, "p=2: your boundaries \\[1\\] leave"),  # fails the lab's own blocks
        (smallest_spread, "costs \\[1, 8, 5, 4, 10, 2\\], p=4: .* leave 12 .* the best split leaves 10"),
        (smallest_squares, "costs \\[1, 8, 5, 4, 10, 2\\], p=4: .* leave 12 .* the best split leaves 10"),
    ],
    ids=["even-split", "greedy-overshoot", "smallest-spread", "smallest-squares"],
)
def test_balance_catches_splits_that_are_not_the_cheapest_busiest(wrong, match):
    graded_fail(exercises.check_balance, wrong, match=f"{FAILED} .*{match}")


def test_balance_hint_names_no_greedy(capsys):
    """Growing each stage up to total / p is not optimal (greedy-overshoot above): the hint must not suggest it."""
    exercises.check_balance(stub)
    out = capsys.readouterr().out
    assert "hint:" in out and "overshoot" not in out


@pytest.mark.parametrize(
    "grader", [exercises.check_fill_drain, exercises.check_choose_m, exercises.check_balance], ids=lambda g: g.__name__
)
def test_stubs_are_not_attempted(grader, capsys):
    assert grader(...) == NOT_ATTEMPTED
    assert "not attempted" in capsys.readouterr().out


@pytest.mark.parametrize("grader", [exercises.check_choose_m, exercises.check_balance], ids=lambda g: g.__name__)
def test_raising_stubs_are_not_attempted(grader):
    assert grader(stub) == NOT_ATTEMPTED


def test_references_agree_with_brute_force():
    assert exercises.best_split([1, 1, 1, 1, 10, 1], 2) == 11
    assert exercises.best_split([2, 2, 2, 2], 4) == 2
    assert exercises.best_split([1, 8, 5, 4, 10, 2], 4) == 10
    assert exercises._reference_m(2, 64, 1.0, 64.0, 0.2) == 4  # the bubble 1/5 is at most 0.2
    assert exercises._reference_m(2, 64, 1.0, 64.0, 0.25) == 4
    assert exercises._reference_m(2, 64, 1.0, 64.0, 0.5) == 2  # m >= p, though m = 1 meets the bubble
    assert exercises._reference_m(2, 64, 1.0, 0.5, 0.5) is None
    assert "_reference_m" not in exercises.__all__
