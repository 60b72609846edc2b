"""hf.exercises: every grader fails the bug its exercise is about, and says 'not attempted' to a stub."""

from __future__ import annotations

import copy
import dataclasses
import math

import pytest
import torch
from accelerate import Accelerator, DataLoaderConfiguration
from accelerate.utils import set_seed
from torch.utils.data import DataLoader
from transformers import Trainer, get_scheduler

from lab_utils.checks import NOT_ATTEMPTED
from lab_utils.labs.lab04_hf import exercises
from tests.helpers.grading import graded_fail
from tools.solutions import solution


def stub(*_args, **_kwargs):
    raise NotImplementedError()


def _fails(grader, *args):
    return graded_fail(grader, *args)


@pytest.mark.parametrize("grader", [exercises.check_loop_from_args, exercises.check_window_loss])
def test_stubs_are_not_attempted(grader):
    assert grader(...) == NOT_ATTEMPTED
    assert grader(stub) == NOT_ATTEMPTED


# exercise 3 from the solutions file: the answer, and the same cell with its answer stubbed out
_own = solution("04_trainer_to_accelerator", "hf-own-loss", {"torch": torch, "Trainer": Trainer})
WeightedLossTrainer, CLASS_WEIGHTS = _own["WeightedLossTrainer"], _own["CLASS_WEIGHTS"]


class _StubbedTrainer(Trainer):
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        raise NotImplementedError()


class _TrustsTheGuess(WeightedLossTrainer):
    """The right loss, but the Trainer is left to guess (None): it believes the model scaled it."""

    def compute_loss(self, *args, **kwargs):
        out = super().compute_loss(*args, **kwargs)
        self.loss_is_scaled_for_ga = None
        return out


class _DividesTwice(WeightedLossTrainer):
    """Divides by the accumulation steps itself, and lets the Trainer divide too."""

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss, outputs = super().compute_loss(model, inputs, True, num_items_in_batch)
        loss = loss / self.args.gradient_accumulation_steps
        return (loss, outputs) if return_outputs else loss


class _DividesItself(Trainer):
    """A student's answer (review 4): weighted cross-entropy divided by the accumulation steps in
    compute_loss, the Trainer told nothing (None: it believes the model scaled it). The gradient of a
    full window is right; evaluate() reports a quarter of the loss, and a short window is divided by 4."""

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        inputs = dict(inputs)
        labels = inputs.pop("labels")
        outputs = model(**inputs)
        loss = torch.nn.functional.cross_entropy(outputs.logits, labels, weight=CLASS_WEIGHTS.to(labels.device))
        loss = loss / self.args.gradient_accumulation_steps
        return (loss, outputs) if return_outputs else loss


class _SaysSoInInit(Trainer):
    """A right answer another way: the model's loss kwargs switched off when the Trainer is built."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.model_accepts_loss_kwargs = False

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        labels = inputs["labels"]
        outputs = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"])
        loss = torch.nn.functional.cross_entropy(outputs.logits, labels, weight=CLASS_WEIGHTS.to(labels.device))
        return (loss, outputs) if return_outputs else loss


class _Unweighted(Trainer):
    """The model's own (unweighted) loss, divided once."""

    loss_is_scaled_for_ga = False


def test_own_loss_passes_the_solution_and_fails_each_wrong_division():
    assert exercises.check_own_loss(_StubbedTrainer, CLASS_WEIGHTS) == NOT_ATTEMPTED
    exercises.check_own_loss(WeightedLossTrainer, CLASS_WEIGHTS)
    exercises.check_own_loss(_SaysSoInInit, CLASS_WEIGHTS)
    assert "eval loss is" in (msg := _fails(exercises.check_own_loss, _DividesItself, CLASS_WEIGHTS))
    assert "(0.25x)" in msg
    assert "4x the gradient" in _fails(exercises.check_own_loss, _TrustsTheGuess, CLASS_WEIGHTS)
    assert "0.25x the gradient" in _fails(exercises.check_own_loss, _DividesTwice, CLASS_WEIGHTS)
    assert "weighted cross-entropy" in _fails(exercises.check_own_loss, _Unweighted, CLASS_WEIGHTS)


# the instructor's answer itself, run from its lab folder's solutions.py (not a copy of it)
right_loop = solution(
    "04_trainer_to_accelerator",
    "hf-loop-from-args",
    {
        "torch": torch,
        "math": math,
        "Accelerator": Accelerator,
        "DataLoaderConfiguration": DataLoaderConfiguration,
        "DataLoader": DataLoader,
        "set_seed": set_seed,
        "get_scheduler": get_scheduler,
    },
)["loop_from_args"]


def _ignores_accumulation(args, model, train_ds):
    """The right loop, but it trains as if gradient_accumulation_steps were 1 (an update per micro-batch)."""
    return right_loop(dataclasses.replace(args, gradient_accumulation_steps=1), model, train_ds)


def _forgets_the_division(args, model, train_ds):
    """Steps once per window by hand, with an Accelerator of one accumulation step, and never
    divides the loss: every update's gradient is the window's sum, grad_accum x too large."""
    k = args.gradient_accumulation_steps
    accelerator = Accelerator(
        cpu=args.use_cpu, dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True, data_seed=args.seed)
    )
    set_seed(args.seed)
    model.activation_checkpointing_enable()
    train_dl = DataLoader(train_ds, batch_size=args.per_device_train_batch_size, shuffle=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate, weight_decay=args.weight_decay)
    scheduler = get_scheduler(args.lr_scheduler_type, optimizer, args.warmup_steps, math.ceil(len(train_dl) / k))
    model, optimizer, train_dl, scheduler = accelerator.prepare(model, optimizer, train_dl, scheduler)
    model.train()
    losses = []
    for i, batch in enumerate(train_dl):
        loss = model(**batch).loss
        accelerator.backward(loss)  # the bug: no division by k
        if (i + 1) % k == 0 or i + 1 == len(train_dl):
            accelerator.clip_grad_norm_(model.parameters(), args.max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
        losses.append(loss.item())
    return losses


def _linear_schedule(args, model, train_ds):
    """A student's answer (review 4): section 2's linear schedule instead of args.lr_scheduler_type."""
    return right_loop(dataclasses.replace(args, lr_scheduler_type="linear"), model, train_ds)


def _schedule_in_micro_batches(args, model, train_ds):
    """A student's answer (review 4): the cosine sized in micro-batches, len(train_dl) x epochs (the
    trap cell 14 names), instead of in updates."""
    real = get_scheduler

    def sized_in_micro_batches(name, optimizer, warmup, updates):
        return real(name, optimizer, warmup, updates * args.gradient_accumulation_steps)

    ns = solution(
        "04_trainer_to_accelerator",
        "hf-loop-from-args",
        {
            "torch": torch,
            "math": math,
            "Accelerator": Accelerator,
            "DataLoaderConfiguration": DataLoaderConfiguration,
            "DataLoader": DataLoader,
            "set_seed": set_seed,
            "get_scheduler": sized_in_micro_batches,
        },
    )
    return ns["loop_from_args"](args, model, train_ds)


def _clips_at_one(args, model, train_ds):
    """Section 2's clipping at 1.0 copied instead of args.max_grad_norm (0.5 here)."""
    args = copy.copy(args)
    args.max_grad_norm = 1.0
    return right_loop(args, model, train_ds)


def _torch_weight_decay(args, model, train_ds):
    """torch.optim.AdamW's default weight decay (0.01) instead of args.weight_decay (0.0)."""
    args = copy.copy(args)
    args.weight_decay = 0.01
    return right_loop(args, model, train_ds)


def test_clip_norms_records_each_norm_and_the_max_norm_asked_for():
    original = torch.nn.utils.clip_grad_norm_
    params = [torch.nn.Parameter(torch.ones(4))]
    params[0].grad = torch.full((4,), 3.0)  # norm 6
    with exercises.clip_norms() as clips:
        torch.nn.utils.clip_grad_norm_(params, max_norm=0.5)
    assert clips == [pytest.approx(6.0)] and clips.max_norms == [0.5]
    assert torch.nn.utils.clip_grad_norm_ is original


@pytest.mark.slow
def test_loop_from_args_passes_the_right_loop_and_fails_the_scaling_and_accumulation_bugs():
    exercises.check_loop_from_args(right_loop)
    msg = _fails(exercises.check_loop_from_args, _ignores_accumulation)
    assert "your optimizer stepped 8 times, the Trainer 4 times" in msg
    # the schedule: a linear one, or a cosine over micro-batches, steps at other learning rates
    msg = _fails(exercises.check_loop_from_args, _linear_schedule)
    assert "learning rates [0.0, 1.0, 0.667, 0.333] x args.learning_rate" in msg
    assert "the Trainer's at [0.0, 1.0, 0.75, 0.25]" in msg
    assert "learning rates [0.0, 1.0, 0.95," in _fails(exercises.check_loop_from_args, _schedule_in_micro_batches)
    # the bug section 3 is about: the losses agree, only the gradient norm shows it
    msg = _fails(exercises.check_loop_from_args, _forgets_the_division)
    assert "gradient norm of your updates is [2.0, 2.0" in msg
    assert "your loop clipped at [1.0]" in _fails(exercises.check_loop_from_args, _clips_at_one)
    assert "weight decay is [0.01]" in _fails(exercises.check_loop_from_args, _torch_weight_decay)


def _local_count(accelerator, token_loss_sum, window_tokens):
    """Normalises by this rank's own tokens: the ranks' tokens end up weighted unequally."""
    return token_loss_sum * accelerator.gradient_accumulation_steps * accelerator.num_processes / window_tokens


def _forgets_the_ranks(accelerator, token_loss_sum, window_tokens):
    """Gathers the count but forgets that DDP averages the ranks' gradients."""
    return token_loss_sum * accelerator.gradient_accumulation_steps / accelerator.gather(window_tokens).sum()


@pytest.mark.slow
def test_window_loss_fails_a_local_count_and_a_forgotten_mean_over_ranks():
    # the right answer is graded ✓ in the solved lab (tests/notebooks/solved_cells.py)
    assert "weighted unequally" in _fails(exercises.check_window_loss, _local_count)
    assert "0.5x one big batch" in _fails(exercises.check_window_loss, _forgets_the_ranks)
