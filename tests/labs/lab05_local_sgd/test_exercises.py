"""Each grader of lab 5 passes the solution, fails the bug its exercise is about (✗, with the
hint), and says "not attempted" for the stub."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from accelerate.local_sgd import LocalSGD

from lab_utils.checks import FAILED, NOT_ATTEMPTED, PASSED
from lab_utils.labs.lab05_local_sgd import exercises
from tests.helpers.grading import graded_fail
from tests.labs.lab05_local_sgd.loops import after_the_block_loop, guide_loop
from tools.solutions import solution

pytestmark = pytest.mark.usefixtures("no_orphans")


def stub(*args, **kwargs):
    raise NotImplementedError()


# ----------------------------------------------------------------------------- lsgd-outer-step (exercise 3)
def outer_nesterov(anchor, averaged, momentum, lr, mu):
    for a, avg, m in zip(anchor, averaged, momentum):
        g = a - avg
        m.mul_(mu).add_(g)
        a.sub_(lr * (g + mu * m))


def outer_no_momentum(anchor, averaged, momentum, lr, mu):
    for a, avg in zip(anchor, averaged):
        a.sub_(lr * (a - avg))


def outer_wrong_sign(anchor, averaged, momentum, lr, mu):
    for a, avg, m in zip(anchor, averaged, momentum):
        g = avg - a
        m.mul_(mu).add_(g)
        a.sub_(lr * (g + mu * m))


def outer_heavy_ball(anchor, averaged, momentum, lr, mu):  # momentum, but not Nesterov's
    for a, avg, m in zip(anchor, averaged, momentum):
        m.mul_(mu).add_(a - avg)
        a.sub_(lr * m)


def test_outer_step_passes_nesterov(capsys):
    assert exercises.check_outer_step(outer_nesterov) == PASSED
    assert PASSED in capsys.readouterr().out


def outer_rebinds_anchor(anchor, averaged, momentum, lr, mu):  # the right formula, the anchor never written
    for a, avg, m in zip(anchor, averaged, momentum):
        g = a - avg
        m.mul_(mu).add_(g)
        a = a - lr * (g + mu * m)  # the mistake: rebinds a local name


def outer_rebinds_momentum(anchor, averaged, momentum, lr, mu):  # right for one round, the buffers never written
    for a, avg, m in zip(anchor, averaged, momentum):
        g = a - avg
        m = mu * m + g  # the mistake: rebinds a local name
        a.sub_(lr * (g + mu * m))


@pytest.mark.parametrize(
    "wrong, says",
    [
        (outer_no_momentum, "lr \\* g, without momentum"),
        (outer_wrong_sign, "points the wrong way"),
        (outer_heavy_ball, "heavy-ball momentum"),
    ],
)
def test_outer_step_names_a_formula_error_without_a_word_on_in_place(wrong, says):
    out = graded_fail(exercises.check_outer_step, wrong, match=f"(?s){FAILED}.*{says}.*hint")
    assert "in place" not in out


@pytest.mark.parametrize(
    "wrong, says",
    [
        (outer_rebinds_anchor, "your anchor did not move: update `anchor` in place"),
        (outer_rebinds_momentum, "round 2 .*momentum buffers stay at zero.*in place"),
    ],
)
def test_outer_step_says_in_place_when_a_tensor_is_not_written(wrong, says):
    graded_fail(exercises.check_outer_step, wrong, match=f"(?s){FAILED}.*{says}.*hint")


@pytest.mark.parametrize("attempt", [..., stub])
def test_outer_step_not_attempted(attempt, capsys):
    assert exercises.check_outer_step(attempt) == NOT_ATTEMPTED
    assert "not attempted" in capsys.readouterr().out


# ----------------------------------------------------------------------------- lsgd-from-scratch (exercise 1)
def averages_gradients(model, opt, batches, H):  # DDP by hand: what local SGD avoids
    for xb, yb in batches:
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= dist.get_world_size()
        opt.step()


def per_tensor_no_exit(model, opt, batches, H):  # Accelerate's averaging, and no averaging at the end
    for step, (xb, yb) in enumerate(batches):
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if (step + 1) % H == 0:
            for p in model.parameters():
                dist.all_reduce(p.data)
                p.data /= dist.get_world_size()


class _WorldOfOne:
    """torch.distributed as the solution sees it, but with a world size of 1: its all-reduce sums
    and the division by the world size divides by 1 (the bug: nobody divides the sum)."""

    @staticmethod
    def all_reduce(*args, **kwargs):  # looked up at each call, so the grader's counter sees it
        return dist.all_reduce(*args, **kwargs)

    @staticmethod
    def get_world_size():
        return 1


# the solution itself, with the bug put into what it imports
forgets_the_division = solution("05_local_sgd", "lsgd-from-scratch", {"torch": torch, "F": F, "dist": _WorldOfOne})[
    "local_sgd_flat"
]


def _average(model):
    params = list(model.parameters())
    buf = torch.cat([p.data.flatten() for p in params])
    dist.all_reduce(buf)
    buf /= dist.get_world_size()
    torch.nn.utils.vector_to_parameters(buf, params)


def listed_first(model, opt, batches, H):  # right: the batches drawn into a list before the loop
    batches = list(batches)
    for i, (xb, yb) in enumerate(batches):
        opt.zero_grad()
        F.cross_entropy(model(xb), yb).backward()
        opt.step()
        if (i + 1) % H == 0 or i + 1 == len(batches):
            _average(model)


def looks_ahead(model, opt, batches, H):  # right: draws the next batch first, to know the last step
    it = iter(batches)
    nxt, done = next(it, None), 0
    while nxt is not None:
        (xb, yb), nxt = nxt, next(it, None)
        opt.zero_grad()
        F.cross_entropy(model(xb), yb).backward()
        opt.step()
        done += 1
        if done % H == 0 or nxt is None:
            _average(model)


def averages_inside_the_step(model, opt, batches, H):  # after the next step's backward, before its update
    done = 0
    for xb, yb in batches:
        opt.zero_grad()
        F.cross_entropy(model(xb), yb).backward()
        if done and done % H == 0:
            _average(model)
        opt.step()
        done += 1
    if done % H:
        _average(model)


def averages_again_at_exit(model, opt, batches, H):  # a student's: averages at exit even right after an averaging
    done = 0
    for xb, yb in batches:
        opt.zero_grad()
        F.cross_entropy(model(xb), yb).backward()
        opt.step()
        done += 1
        if done % H == 0:
            _average(model)
    _average(model)


local_sgd_flat = solution("05_local_sgd", "lsgd-from-scratch", {"torch": torch, "F": F, "dist": dist})["local_sgd_flat"]


@pytest.mark.parametrize("right", [local_sgd_flat, listed_first, looks_ahead])
def test_local_sgd_passes_however_the_batches_are_drawn(right):
    """The same 3 all-reduces after the same updates, the same parameters: graded by updates, not draws."""
    assert exercises.check_local_sgd(right) == PASSED


def test_local_sgd_reference_is_private():
    assert not hasattr(exercises, "local_sgd_flat") and "local_sgd_flat" not in exercises.__all__


@pytest.mark.parametrize(
    "wrong, says",
    [
        (averages_gradients, r"collectives when \[0, 1, 2, 3, 4, 5, 6, 7, 8, 9\] optimizer updates were done"),
        (per_tensor_no_exit, r"collectives when \[4, 8\] optimizer updates were done"),
        (forgets_the_division, "differ from the reference"),
        (averages_inside_the_step, r"after updates \[4, 8\] ran after the next step's forward"),
        (averages_again_at_exit, r"collectives after updates \[4, 8, 8\] with H=4 over 8 updates.*only if updates ran"),
    ],
)
def test_local_sgd_fails_wrong_loops(wrong, says):
    graded_fail(exercises.check_local_sgd, wrong, match=f"(?s){FAILED}.*{says}.*hint")


@pytest.mark.parametrize("attempt", [..., stub])
def test_local_sgd_not_attempted(attempt, capsys):
    assert exercises.check_local_sgd(attempt) == NOT_ATTEMPTED


# ----------------------------------------------------------------------------- lsgd-update-loop (exercise 2)
def test_update_loop_fails_the_guides_loop():  # local_sgd.step() after every micro-batch
    graded_fail(exercises.check_update_loop, guide_loop, match=f"(?s){FAILED}.*averagings in 8 updates.*hint")


update_loop = solution("05_local_sgd", "lsgd-update-loop", {"LocalSGD": LocalSGD, "F": F})["update_loop"]


@pytest.mark.parametrize("right", [update_loop, after_the_block_loop])
def test_update_loop_passes_local_sgd_stepped_inside_or_after_the_accumulate_block(right):
    """After the block (the meter files the averaging under the next micro-batch): the same averagings
    after the same updates, the same parameters."""
    assert exercises.check_update_loop(right) == PASSED


def _divides_twice(accelerator, model, optimizer, scheduler, dataloader, local_sgd_steps):
    """Counts updates right, but divides the loss by the accumulation steps, which accelerate does already."""
    with LocalSGD(accelerator=accelerator, model=model, local_sgd_steps=local_sgd_steps, enabled=True) as lsgd:
        for inputs, targets in dataloader:
            with accelerator.accumulate(model):
                loss = F.cross_entropy(model(inputs), targets) / accelerator.gradient_accumulation_steps
                accelerator.backward(loss)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
                if accelerator.sync_gradients:
                    lsgd.step()


def test_update_loop_fails_right_averagings_with_wrong_parameters():
    graded_fail(
        exercises.check_update_loop, _divides_twice, match=r"(?s)final parameters differ from a correct run.*hint"
    )


def _counts_by_index(accelerator, model, optimizer, scheduler, dataloader, local_sgd_steps):
    """Counts updates from the micro-batch index, not sync_gradients: misses the short last window."""
    acc = accelerator.gradient_accumulation_steps
    with LocalSGD(accelerator=accelerator, model=model, local_sgd_steps=local_sgd_steps, enabled=True) as lsgd:
        for i, (inputs, targets) in enumerate(dataloader):
            with accelerator.accumulate(model):
                accelerator.backward(F.cross_entropy(model(inputs), targets))
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
                if (i + 1) % acc == 0:
                    lsgd.step()


def test_update_loop_fails_a_count_from_the_index():
    graded_fail(exercises.check_update_loop, _counts_by_index, match=r"(?s)in 5 updates \(accumulation 3.*hint")


def _no_accumulate(accelerator, model, optimizer, scheduler, dataloader, local_sgd_steps):
    """Steps every micro-batch, outside accelerator.accumulate: no accumulation window at all."""
    with LocalSGD(accelerator=accelerator, model=model, local_sgd_steps=local_sgd_steps, enabled=True) as lsgd:
        for inputs, targets in dataloader:
            accelerator.backward(F.cross_entropy(model(inputs), targets))
            optimizer.step()
            optimizer.zero_grad()
            lsgd.step()


def test_update_loop_fails_a_loop_without_accumulate():
    graded_fail(exercises.check_update_loop, _no_accumulate, match=r"(?s)0 of 16 micro-batches ran in an accel.*hint")


@pytest.mark.parametrize("attempt", [..., stub])
def test_update_loop_not_attempted(attempt):
    assert exercises.check_update_loop(attempt) == NOT_ATTEMPTED


def _lists_the_loader(accelerator, model, optimizer, scheduler, dataloader, local_sgd_steps):
    """A student's: the right placement, but over list(dataloader): the last, shorter window never syncs."""
    exercises._update_loop_reference(accelerator, model, optimizer, scheduler, list(dataloader), local_sgd_steps)


def test_update_loop_fails_a_listed_loader_on_the_missing_update():
    graded_fail(
        exercises.check_update_loop,
        _lists_the_loader,
        match=r"(?s)only 4 of 5 optimizer updates ran \(accumulation 3.*iterate the prepared dataloader.*hint",
    )


def _averages_before_the_update(accelerator, model, optimizer, scheduler, dataloader, local_sgd_steps):
    """A student's: local_sgd.step() when the window syncs, but before optimizer.step()."""
    with LocalSGD(accelerator=accelerator, model=model, local_sgd_steps=local_sgd_steps, enabled=True) as lsgd:
        for inputs, targets in dataloader:
            with accelerator.accumulate(model):
                accelerator.backward(F.cross_entropy(model(inputs), targets))
                if accelerator.sync_gradients:
                    lsgd.step()
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()


def test_update_loop_fails_an_averaging_before_the_update():
    graded_fail(
        exercises.check_update_loop,
        _averages_before_the_update,
        match=r"(?s)averagings after updates \[2, 5\] \(accumulation 2.*between a window's backward and its "
        r"optimizer.step\(\): call local_sgd.step\(\) after optimizer.step\(\).*hint",
    )
