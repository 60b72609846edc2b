"""hf.exercises: every grader fails the bug its exercise is about, and says 'not attempted' to a stub."""

from __future__ import annotations

import contextlib
import math

import pytest
import torch
from accelerate import Accelerator, DataLoaderConfiguration
from accelerate.utils import set_seed
from torch.utils.data import DataLoader
from transformers import get_scheduler

from lab_utils.checks import FAILED, NOT_ATTEMPTED
from lab_utils.topics.hf import exercises


def stub(*_args, **_kwargs):
    raise NotImplementedError()


def _fails(grader, *args):
    with pytest.raises(AssertionError) as err:
        grader(*args)
    assert str(err.value).startswith(FAILED)
    return str(err.value)


@pytest.mark.parametrize(
    "grader",
    [
        exercises.check_names,
        exercises.check_loop_from_args,
        exercises.check_by_hand,
        exercises.check_scaled_loss,
    ],
)
def test_stubs_are_not_attempted(grader):
    assert grader(...) == NOT_ATTEMPTED
    if grader is not exercises.check_names:
        assert grader(stub) == NOT_ATTEMPTED


def test_names_rejects_the_talks_names():
    talk = dict(evaluation_strategy="epoch", gradient_accumulation_steps=4, gradient_checkpointing=True)
    assert "talk's names" in _fails(exercises.check_names, talk)
    warns = dict(eval_strategy="epoch", gradient_accumulation_steps=4, gradient_checkpointing=True, use_cpu=True)
    _fails(exercises.check_names, warns)


def _loop(args, model, train_ds, *, accumulate=True):
    accelerator = Accelerator(
        gradient_accumulation_steps=args.gradient_accumulation_steps if accumulate else 1,
        cpu=True,
        dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True, data_seed=args.seed),
    )
    set_seed(args.seed)
    train_dl = DataLoader(train_ds, batch_size=args.per_device_train_batch_size, shuffle=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate, weight_decay=0.0)
    updates = math.ceil(len(train_dl) / args.gradient_accumulation_steps)
    scheduler = get_scheduler(args.lr_scheduler_type, optimizer, args.warmup_steps, updates)
    model, optimizer, train_dl, scheduler = accelerator.prepare(model, optimizer, train_dl, scheduler)
    losses = []
    for batch in train_dl:
        with accelerator.accumulate(model):
            loss = model(**batch).loss
            accelerator.backward(loss)
            if accelerator.sync_gradients:
                accelerator.clip_grad_norm_(model.parameters(), args.max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
        losses.append(loss.item())
    return losses


@pytest.mark.slow
def test_loop_from_args_passes_the_right_loop_and_fails_one_without_accumulation():
    exercises.check_loop_from_args(_loop)
    msg = _fails(exercises.check_loop_from_args, lambda a, m, d: _loop(a, m, d, accumulate=False))
    assert "losses part at micro-batch" in msg


def _no_no_sync(accelerator, model, optimizer, batches):
    k = accelerator.gradient_accumulation_steps
    for i, (x, y) in enumerate(batches):
        accelerator.backward(torch.nn.functional.mse_loss(model(x), y))  # all-reduces every time
        if (i + 1) % k == 0:
            optimizer.step()
            optimizer.zero_grad()


def _step_every_micro_batch(accelerator, model, optimizer, batches):
    for x, y in batches:
        with accelerator.no_sync(model):
            accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
        optimizer.step()
        optimizer.zero_grad()


def _forward_outside_no_sync(accelerator, model, optimizer, batches):
    k = accelerator.gradient_accumulation_steps
    for i, (x, y) in enumerate(batches):
        sync = (i + 1) % k == 0
        loss = torch.nn.functional.mse_loss(model(x), y)  # forward outside: DDP has prepared to sync
        with contextlib.nullcontext() if sync else accelerator.no_sync(model):
            accelerator.backward(loss)
        if sync:
            optimizer.step()
            optimizer.zero_grad()


@pytest.mark.slow
@pytest.mark.usefixtures("no_orphans")
def test_by_hand_fails_without_no_sync_and_with_a_step_per_micro_batch():
    assert "gradient all-reduces" in _fails(exercises.check_by_hand, _no_no_sync)
    assert "gradient all-reduces" in _fails(exercises.check_by_hand, _forward_outside_no_sync)
    assert "parameters differ" in _fails(exercises.check_by_hand, _step_every_micro_batch)


def test_scaled_loss_fails_when_backwards_division_is_forgotten():
    exercises.check_scaled_loss(lambda s, n, k: s / n * k)
    assert "one big batch gives" in _fails(exercises.check_scaled_loss, lambda s, n, k: s / n)
