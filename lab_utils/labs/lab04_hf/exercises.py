"""Graders of lab 4's exercises: each runs the student's code and measures it against a reference.

exercises.check_loop_from_args(loop_from_args) # 1: the Trainer's losses AND gradient norms
exercises.check_own_loss(WeightedLossTrainer, CLASS_WEIGHTS)  # 2: your own loss, divided once
exercises.check_window_loss(window_loss)       # 3: a window's tokens across 2 real ranks
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch.optim.optimizer import register_optimizer_step_pre_hook
from transformers import Trainer, TrainingArguments
from transformers.trainer_callback import PrinterCallback

from lab_utils.accelerate_meter import fresh_accelerate
from lab_utils.checks import grader
from lab_utils.env import dist_info
from lab_utils.flat import flat
from lab_utils.labs.lab04_hf.data import build_model, make_splits, offline
from lab_utils.labs.lab04_hf.trainer import TrainerMeter

__all__ = [
    "clip_norms",
    "weight_decays",
    "exercise_args",
    "trainer_losses",
    "check_loop_from_args",
    "check_own_loss",
    "token_window_rank",
    "check_window_loss",
]


# ----------------------------------------------------------------------------- 1. loop from arguments
def exercise_args(output_dir: str) -> TrainingArguments:
    """hf-loop-from-args' Trainer setup: other settings than section 2's (cosine schedule with warm-up,
    clipping at 0.5, 2 accumulation steps, another seed). One warm-up step of 4 updates: the cosine's
    learning rates [0, 1, .75, .25] x 3e-3 part from a linear schedule's and from a cosine sized in
    micro-batches at the third update, whose weights two micro-batches' losses still see."""
    return TrainingArguments(
        output_dir=output_dir,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        activation_checkpointing=True,
        num_train_epochs=1,
        learning_rate=3e-3,
        lr_scheduler_type="cosine",
        warmup_steps=1,
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


class Clips(list):
    """The total norm (before clipping) of each clipping call; ``max_norms`` the ``max_norm`` each asked for."""

    max_norms: list[float]


@contextlib.contextmanager
def clip_norms() -> Iterator[Clips]:
    """The total norm (before clipping) of every ``torch.nn.utils.clip_grad_norm_`` call in the
    block, and the ``max_norm`` of each: ``accelerator.clip_grad_norm_`` and the Trainer's clipping
    both go through it."""
    original, norms = torch.nn.utils.clip_grad_norm_, Clips()
    norms.max_norms = []

    def clip(parameters: Any, max_norm: float, *args: Any, **kwargs: Any) -> torch.Tensor:
        norm = original(parameters, max_norm, *args, **kwargs)
        norms.append(float(norm))
        norms.max_norms.append(float(max_norm))
        return norm

    torch.nn.utils.clip_grad_norm_ = clip
    try:
        yield norms
    finally:
        torch.nn.utils.clip_grad_norm_ = original


class Decays(set):
    """The ``weight_decay`` of every parameter group seen; ``lrs`` the first group's learning rate at
    each real optimizer step, in order."""

    lrs: list[float]


@contextlib.contextmanager
def weight_decays() -> Iterator[Decays]:
    """The ``weight_decay`` of every parameter group of every optimizer that steps in the block, and
    the learning rate of each step (a global step pre-hook: a prepared optimizer's inner one is seen,
    and only when it really steps, not on the micro-batches that accumulate)."""
    seen = Decays()
    seen.lrs = []

    def record(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        seen.update(float(g.get("weight_decay", 0.0)) for g in optimizer.param_groups)
        seen.lrs.append(float(optimizer.param_groups[0]["lr"]))

    handle = register_optimizer_step_pre_hook(record)
    try:
        yield seen
    finally:
        handle.remove()


def trainer_losses(
    args: TrainingArguments, n_train: int = 32
) -> tuple[list[float], list[int], list[float], list[float]]:
    """What section 1's corrected Trainer (``loss_is_scaled_for_ga = False``) does with ``args``: each
    micro-batch's loss, the order it read the data, the gradient norm of each update (before
    clipping) and the learning rate of each update."""
    offline()
    train_ds, _ = make_splits(n_train, 4)
    model = build_model()
    with fresh_accelerate(), TrainerMeter() as meter, clip_norms() as clips, weight_decays() as steps:
        trainer = Trainer(model=model, args=args, train_dataset=train_ds)
        trainer.loss_is_scaled_for_ga = False  # this model's loss is a plain mean (section 3)
        trainer.remove_callback(PrinterCallback)
        trainer.train()
    return meter.micro_losses, list(train_ds.order), clips, steps.lrs


@grader(
    "hf-loop-from-args",
    "an Accelerate loop from TrainingArguments",
    hint="reread section 2: every Trainer default has a line in the loop",
)
def check_loop_from_args(loop_from_args: Callable[..., list[float]]) -> str:
    with tempfile.TemporaryDirectory() as d:
        args = exercise_args(d)
        train_ds, _ = make_splits(32, 4)
        # the student's loop first: a stub stops here, before the Trainer's run
        with fresh_accelerate(), clip_norms() as clips, weight_decays() as decays:
            got = loop_from_args(args, build_model(), train_ds)
        want, want_order, want_norms, want_lrs = trainer_losses(args, n_train=len(train_ds))
    got = [float(x) for x in got]
    assert len(got) == len(want), f"your loop returned {len(got)} losses, the Trainer saw {len(want)} micro-batches"
    assert list(train_ds.order) == want_order, "your loop read the data in another order than the Trainer"
    # a few updates of a small weight decay move the losses by ~3e-5 only: read the optimizer's setting
    assert decays <= {args.weight_decay, 0.0}, (
        f"your optimizer's weight decay is {sorted(decays)}, the Trainer's args.weight_decay = {args.weight_decay} "
        f"(torch's AdamW defaults to 0.01)"
    )
    assert all(m == args.max_grad_norm for m in clips.max_norms), (
        f"your loop clipped at {sorted(set(clips.max_norms))}, the Trainer at args.max_grad_norm = {args.max_grad_norm}"
    )
    # the schedule: the learning rate of every real step, not the losses (a last update's is never seen)
    assert len(decays.lrs) == len(want_lrs), (
        f"your optimizer stepped {len(decays.lrs)} times, the Trainer {len(want_lrs)} times (once per "
        f"{args.gradient_accumulation_steps} micro-batches)"
    )
    assert all(abs(a - b) <= 1e-6 * args.learning_rate for a, b in zip(decays.lrs, want_lrs)), (
        f"your optimizer stepped at learning rates {[round(x / args.learning_rate, 3) for x in decays.lrs]} "
        f"x args.learning_rate, the Trainer's at {[round(x / args.learning_rate, 3) for x in want_lrs]} "
        f"(args.lr_scheduler_type and args.warmup_steps, over the number of updates, not of micro-batches)"
    )
    gap = max(abs(a - b) for a, b in zip(got, want))
    first = next(i for i, (a, b) in enumerate(zip(got, want)) if abs(a - b) > 1e-5) if gap > 1e-5 else None
    assert first is None, f"the losses part at micro-batch {first} (largest gap {gap:.2g})"
    # AdamW and clipping hide a wrong gradient scale from the losses (section 3): the norms show it
    assert clips, "your loop never clipped the gradients (the Trainer clips at args.max_grad_norm)"
    assert len(clips) == len(want_norms), (
        f"your loop clipped {len(clips)} times, the Trainer once per update ({len(want_norms)} updates)"
    )
    ratios = [a / b for a, b in zip(clips, want_norms)]
    bad = [r for r in ratios if abs(r - 1) > 1e-4]
    assert not bad, (
        f"same losses, but the gradient norm of your updates is {[round(r, 3) for r in ratios]} x the "
        f"Trainer's (is each micro-batch's loss divided by the {args.gradient_accumulation_steps} "
        f"accumulation steps exactly once?)"
    )
    return f"{len(got)} micro-batch losses and {len(ratios)} gradient norms equal to the Trainer's"


# ----------------------------------------------------------------------------- 2. your own loss
_OWN_K, _OWN_B, _OWN_EVAL = 4, 4, 16  # one window of 4 micro-batches of 4 sequences; 16 to evaluate


def _weighted_loss(model: torch.nn.Module, ds: Any, rows: Any, weights: torch.Tensor) -> float:
    """The weighted cross-entropy (a mean over ``rows`` of ``ds``) of ``model`` in eval mode."""
    items = [ds[i] for i in rows]
    device = next(model.parameters()).device
    batch = {key: torch.stack([it[key] for it in items]).to(device) for key in items[0]}
    was_training = model.training
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        loss = F.cross_entropy(logits.float(), batch["labels"], weight=weights.to(device)).item()
    model.train(was_training)
    return loss


def _reference_window(model: torch.nn.Module, train_ds: Any, order: list[int], weights: torch.Tensor) -> tuple:
    """The gradient norm and mean loss of the window's mean of weighted micro-batch losses, at ``model``."""
    model.zero_grad()
    losses = []
    for k in range(_OWN_K):
        items = [train_ds[i] for i in order[k * _OWN_B : (k + 1) * _OWN_B]]
        batch = {key: torch.stack([it[key] for it in items]) for key in items[0]}
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        loss = F.cross_entropy(logits, batch["labels"], weight=weights)
        (loss / _OWN_K).backward()
        losses.append(loss.item())
    norm = flat(model, grads=True, dtype=torch.float64).norm().item()
    return norm, sum(losses) / _OWN_K


@grader(
    "hf-own-loss",
    "your own loss in the Trainer",
    hint="reread section 3: what the Trainer believes about a loss, and its setting loss_is_scaled_for_ga",
)
def check_own_loss(trainer_cls: type, class_weights: Any) -> str:
    assert isinstance(trainer_cls, type) and issubclass(trainer_cls, Trainer), "write a subclass of Trainer"
    weights = torch.as_tensor(class_weights, dtype=torch.float32)
    offline()
    train_ds, eval_ds = make_splits(_OWN_K * _OWN_B, _OWN_EVAL)
    with tempfile.TemporaryDirectory() as d:
        args = TrainingArguments(
            output_dir=d,
            per_device_train_batch_size=_OWN_B,
            per_device_eval_batch_size=_OWN_EVAL,  # the eval set in one batch: its loss is one mean
            gradient_accumulation_steps=_OWN_K,
            num_train_epochs=1,
            learning_rate=1e-3,
            optim="sgd",
            max_grad_norm=1e9,  # never clips, but logs the norm
            logging_steps=1,
            report_to="none",
            save_strategy="no",
            disable_tqdm=True,
            seed=3,
            use_cpu=not torch.cuda.is_available(),
        )
        with fresh_accelerate():
            trainer = trainer_cls(model=build_model(), args=args, train_dataset=train_ds)
            trainer.remove_callback(PrinterCallback)
            trainer.train()
            got_eval = trainer.evaluate(eval_dataset=eval_ds)["eval_loss"]
    logs = [h for h in trainer.state.log_history if "grad_norm" in h]
    assert logs, "the Trainer logged no update: did train() run?"
    want_norm, want_loss = _reference_window(build_model(), train_ds, list(train_ds.order), weights)
    got_norm, got_loss = logs[0]["grad_norm"], logs[0]["loss"]
    ratio, loss_ratio = got_norm / want_norm, got_loss / want_loss
    assert abs(ratio - loss_ratio) <= 1e-3 * max(ratio, loss_ratio), (
        f"the Trainer logged a loss of {got_loss:.4f} for the window and a gradient norm of {got_norm:.4g}; the "
        f"mean of the weighted cross-entropy of its micro-batches gives {want_loss:.4f} and {want_norm:.4g}, not "
        f"in the same ratio (is your loss weighted by class_weights and a mean over the micro-batch?)"
    )
    assert abs(ratio - 1) <= 1e-4, (
        f"the gradient of the window is {ratio:.3g}x the gradient of the mean of its micro-batch losses "
        f"(who divides by the {_OWN_K} accumulation steps, and how many times?)"
    )
    # a loss divided by the steps in compute_loss, the Trainer told nothing (None): the gradient is right,
    # but evaluate() reports what compute_loss returns, and a short last window is divided by K anyway
    want_eval = _weighted_loss(trainer.model, eval_ds, range(len(eval_ds)), weights)
    assert abs(got_eval / want_eval - 1) <= 1e-4, (
        f"the Trainer's eval loss is {got_eval:.4f}, the weighted cross-entropy of the eval set "
        f"{want_eval:.4f} ({got_eval / want_eval:.3g}x): compute_loss returns the micro-batch's mean, "
        f"the division by the accumulation steps is the Trainer's (loss_is_scaled_for_ga)"
    )
    return f"the window's gradient is the mean of {_OWN_K} weighted micro-batch losses (norm {got_norm:.3g})"


# ----------------------------------------------------------------------------- 3. tokens across ranks
# Each rank's micro-batches hold very different numbers of target tokens, and the two ranks'
# windows differ too (52 vs 45 tokens): a count that is not gathered, a missing num_processes (1/2)
# or a missing grad_accum (1/3) each give another gradient than one big batch of all 97 tokens.
_TOKENS = ((3, 40, 9), (25, 6, 14))  # [rank][micro-batch] target tokens
_VOCAB, _WIDTH = 11, 8


def _tiny_lm() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Embedding(_VOCAB, _WIDTH), torch.nn.Linear(_WIDTH, _VOCAB))


def _token_data() -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
    g = torch.Generator().manual_seed(1)
    return [
        [(torch.randint(0, _VOCAB, (n,), generator=g), torch.randint(0, _VOCAB, (n,), generator=g)) for n in rank]
        for rank in _TOKENS
    ]


def token_window_rank(window_loss: Callable[..., Any]) -> dict[str, float]:
    """One rank of hf-window-loss' check: a window of 3 micro-batches through ``accumulate`` with the
    student's loss, then this rank's gradient against one big batch over every rank's tokens."""
    from accelerate import Accelerator

    with fresh_accelerate():
        me = dist_info()
        rank, world = me.rank, me.world_size
        accelerator = Accelerator(gradient_accumulation_steps=len(_TOKENS[0]), cpu=torch.cuda.device_count() < world)
        data = _token_data()
        ref = _tiny_lm()
        x, y = torch.cat([t for r in data for t, _ in r]), torch.cat([t for r in data for _, t in r])
        F.cross_entropy(ref(x), y).backward()  # the big batch: mean over all tokens
        want = flat(ref, grads=True)

        model = accelerator.prepare(_tiny_lm())
        mine = data[rank]
        window_tokens = torch.tensor(sum(len(t) for t, _ in mine), device=accelerator.device)
        for inputs, targets in mine:
            with accelerator.accumulate(model):
                logits = model(inputs.to(accelerator.device))
                token_loss_sum = F.cross_entropy(logits, targets.to(accelerator.device), reduction="sum")
                accelerator.backward(window_loss(accelerator, token_loss_sum, window_tokens))
        got = flat(model, grads=True)
    return {
        "ratio": float(got.norm() / want.norm()),
        "gap": float((got - want).norm() / want.norm()),
        "cos": float(F.cosine_similarity(got, want, dim=0)),
    }


@grader(
    "hf-window-loss",
    "a window's tokens across ranks",
    hint="the count is the window's over ALL ranks (accelerator.gather), and both accelerator.backward "
    "(÷ gradient_accumulation_steps) and DDP (mean over ranks) divide the loss you hand it",
)
def check_window_loss(window_loss: Callable[..., Any]) -> str:
    from lab_utils.launcher import launch

    ranks = launch(token_window_rank, world_size=2, args=(window_loss,), timeout=120)
    r = ranks[0]
    if r["gap"] <= 1e-5:
        n = sum(map(sum, _TOKENS))
        return f"on {len(ranks)} ranks, the window's gradient equals one big batch of all {n} tokens"
    if r["cos"] < 1 - 1e-6:
        raise AssertionError(
            f"your gradient points elsewhere than one big batch's (cosine {r['cos']:.4f}): the ranks' tokens were "
            f"weighted unequally (is the token count gathered over the ranks, not this rank's own?)"
        )
    raise AssertionError(
        f"right direction, but the gradient is {r['ratio']:.3g}x one big batch's "
        f"(2 ranks, {len(_TOKENS[0])} micro-batches per window: who divides, and by what?)"
    )
