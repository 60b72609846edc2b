"""Graders of lab 4's exercises: each runs the student's code and measures it against a reference.

    from lab_utils.topics.hf import exercises
    exercises.check_names(answer)                 # 1: the talk's TrainingArguments, today's names
    exercises.check_loop_from_args(loop_from_args) # 2: an Accelerate loop == the Trainer's losses
    exercises.check_by_hand(train_by_hand)         # 3: no_sync by hand == accumulate(), on 2 ranks
    exercises.check_scaled_loss(scaled_loss)       # 4: a token-normalised loss through accelerator.backward

Each prints ○ (not attempted), ✓, or raises ✗ with a hint (``lab_utils.checks.grader``).
"""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import torch
from transformers import Trainer, TrainingArguments
from transformers.trainer_callback import PrinterCallback

from lab_utils.checks import grader
from lab_utils.launch import launch
from lab_utils.topics.hf import handsync
from lab_utils.topics.hf.data import build_model, make_splits, offline
from lab_utils.topics.hf.guards import reset_accelerate_state
from lab_utils.topics.hf.trainer import TrainerMeter

__all__ = [
    "check_names",
    "exercise_args",
    "trainer_losses",
    "check_loop_from_args",
    "check_by_hand",
    "check_scaled_loss",
]


# ----------------------------------------------------------------------------- 1. names
_TALK_NAMES = ("evaluation_strategy", "gradient_checkpointing", "no_cuda")  # the exercise's old names


@grader(
    "Exercise 1 · the talk's arguments, today",
    hint="section 1's Trainer cell spells them today's way; section 6 shows the old ones fail",
)
def check_names(answer: Mapping[str, Any]) -> str:
    assert isinstance(answer, Mapping), f"answer is a {type(answer).__name__}: write the keyword arguments as a dict"
    old = [k for k in answer if k in _TALK_NAMES]
    assert not old, f"{old} are the talk's names"
    with tempfile.TemporaryDirectory() as d, warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            args = TrainingArguments(output_dir=d, report_to="none", **dict(answer))
        except (TypeError, ValueError, Warning) as e:
            raise AssertionError(f"TrainingArguments refused or warned: {e}") from None
    assert str(args.eval_strategy.value) == "epoch", "evaluation should run after each epoch"
    assert args.gradient_accumulation_steps == 4, "keep the 4 accumulation steps"
    assert args.activation_checkpointing, "keep checkpointing on"
    assert args.use_cpu or torch.cuda.is_available(), "no GPU here: say so the way transformers 5 spells it"
    return "built with current names, no warning"


# ----------------------------------------------------------------------------- 2. loop from arguments
def exercise_args(output_dir: str) -> TrainingArguments:
    """Exercise 2's Trainer setup: other settings than section 2's (cosine schedule with warm-up,
    clipping at 0.5, 2 accumulation steps, another seed)."""
    return TrainingArguments(
        output_dir=output_dir,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        activation_checkpointing=True,
        num_train_epochs=1,
        learning_rate=3e-3,
        lr_scheduler_type="cosine",
        warmup_steps=2,
        max_grad_norm=0.5,
        weight_decay=0.0,
        optim="adamw_torch",
        seed=7,
        eval_strategy="no",
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        use_cpu=not torch.cuda.is_available(),
    )


def trainer_losses(args: TrainingArguments, n_train: int = 32) -> tuple[list[float], list[int]]:
    """What the Trainer does with ``args``: each micro-batch's loss and the order it read the data."""
    offline()
    train_ds, _ = make_splits(n_train, 4)
    model = build_model()
    model.accepts_loss_kwargs = False  # this model's loss is a plain mean (section 3)
    reset_accelerate_state()
    try:
        with TrainerMeter(batches=0) as meter:
            trainer = Trainer(model=model, args=args, train_dataset=train_ds)
            trainer.remove_callback(PrinterCallback)
            trainer.train()
    finally:
        reset_accelerate_state()
    return meter.micro_losses, list(train_ds.order)


@grader(
    "Exercise 2 · an Accelerate loop from TrainingArguments",
    hint="reread sections 2 and 3: every Trainer default has a line in the loop",
)
def check_loop_from_args(loop_from_args: Callable[..., list[float]]) -> str:
    with tempfile.TemporaryDirectory() as d:
        args = exercise_args(d)
        train_ds, _ = make_splits(32, 4)
        reset_accelerate_state()
        try:  # the student's loop first: a stub stops here, before the Trainer's run
            got = loop_from_args(args, build_model(), train_ds)
        finally:
            reset_accelerate_state()
        want, want_order = trainer_losses(args, n_train=len(train_ds))
    got = [float(x) for x in got]
    assert len(got) == len(want), f"your loop returned {len(got)} losses, the Trainer saw {len(want)} micro-batches"
    assert list(train_ds.order) == want_order, "your loop read the data in another order than the Trainer"
    gap = max(abs(a - b) for a, b in zip(got, want))
    first = next(i for i, (a, b) in enumerate(zip(got, want)) if abs(a - b) > 1e-5) if gap > 1e-5 else None
    assert first is None, f"the losses part at micro-batch {first} (largest gap {gap:.2g})"
    return f"{len(got)} micro-batch losses equal to the Trainer's"


# ----------------------------------------------------------------------------- 3. no_sync by hand
@grader(
    "Exercise 3 · accumulate() by hand with no_sync",
    hint="reread section 3: what accumulate() does on a micro-batch that does not end a window",
)
def check_by_hand(train_by_hand: Callable[..., Any]) -> str:
    ranks = launch(handsync.compare_on_rank, world_size=2, args=(train_by_hand,), timeout=240)
    for rank, r in enumerate(ranks):
        assert r["moved"] > 1e-3, "the reference did not train: report this"
        assert r["gap"] <= 1e-6, (
            f"rank {rank}: your parameters differ from accumulate()'s by up to {r['gap']:.2g} "
            f"(which micro-batches step the optimizer, and by how much is each loss scaled?)"
        )
        assert r["collectives"] == r["reference_collectives"], (
            f"rank {rank}: your loop made {r['collectives']} gradient all-reduces, "
            f"accumulate() makes {r['reference_collectives']} (one per window)"
        )
    return f"same parameters as accumulate() on {len(ranks)} ranks, {ranks[0]['collectives']} all-reduces each"


# ----------------------------------------------------------------------------- 4. through accelerator.backward
@grader(
    "Exercise 4 · token-normalised loss through accelerator.backward",
    hint="reread section 3: what accelerator.backward does to the loss",
)
def check_scaled_loss(scaled_loss: Callable[[Any, int, int], Any]) -> str:
    g = torch.Generator().manual_seed(1)
    for k in (2, 4):
        tokens = torch.randint(1, 40, (k,), generator=g)
        sums = torch.rand(k, generator=g, dtype=torch.float64) * tokens
        big = (sums.sum() / tokens.sum()).item()  # one batch: the mean over all tokens
        got = sum(float(scaled_loss(s, int(tokens.sum()), k)) / k for s in sums)  # backward divides by k
        assert abs(got - big) <= 1e-9 * max(1.0, abs(big)), (
            f"with grad_accum={k}, after accelerator.backward's division your losses add up to "
            f"{got:.6f}; one big batch gives {big:.6f}"
        )
    return "the window equals one big batch for 2 and 4 accumulation steps"
