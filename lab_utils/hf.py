"""One classification job, two ways: the Hugging Face ``Trainer`` and the Accelerate loop it hides.

    from lab_utils import hf
    job = dict(n_train=256, n_val=128, batch_size=8, grad_accum=4, checkpointing=True, epochs=2)
    t = hf.run_trainer(**job)            # Trainer: eval each epoch, metrics, time, memory
    a = hf.run_accelerate(**job)         # the same job written as an Accelerate loop
    hf.loss_gap(t, a)                    # largest difference of the micro-batch losses
    launch(hf.run_accelerate, 2, kwargs=job)   # the loop on 2 real processes (CommCounter inside)

Both runs return plain dicts with the same keys (``micro_losses``, ``lrs``, ``evals``,
``seconds``, ``samples_per_second``, ``saved_bytes``, ``cuda_peak_bytes``, ``order``, ...), so
they can be compared, plotted, or sent back from a rank. ``run_accelerate`` reads its process
group from the environment, so it runs unchanged in the notebook, under ``lab_utils.launch``,
``torchrun -m lab_utils.run lab_utils.hf:run_accelerate`` and ``accelerate launch``
(``labs/scripts/accelerate_job.py``).

Names. transformers 5 renamed what the talk uses: ``TALK_TO_CURRENT`` maps the old names to the
pinned ones and ``current_names(**old)`` translates a dict of arguments.

The Trainer's trap: GPT-2's sequence classifier takes ``**kwargs``, so the Trainer passes it
``num_items_in_batch`` and trusts it to normalise the loss, which it does not: the loss is then
not divided by the accumulation steps (``model_scales_loss_itself``; ``run_trainer`` fixes it
unless ``fix_loss_scaling=False``). The launch traps live in ``hf_launch``, the mechanics of
Accelerate's accumulation in ``hf_mechanics``.
"""

from __future__ import annotations

import math
import os
import tempfile
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from lab_utils.hf_launch import check_processes, reset_accelerate_state

__all__ = [
    "offline",
    "TALK_TO_CURRENT",
    "current_names",
    "ClassificationDataset",
    "make_splits",
    "accuracy_f1",
    "compute_metrics",
    "build_model",
    "model_scales_loss_itself",
    "training_args",
    "run_trainer",
    "run_accelerate",
    "evaluate",
    "warm_up",
    "window_means",
    "loss_gap",
    "check_names_answer",
]


def offline() -> None:
    """Forbid hub downloads in this process (and the ranks it starts): everything is built locally."""
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        os.environ[var] = "1"
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


# ----------------------------------------------------------------------------- names
TALK_TO_CURRENT: dict[str, str] = {
    "evaluation_strategy": "eval_strategy",  # removed in transformers 5: TypeError
    "no_cuda": "use_cpu",  # removed in transformers 5: TypeError
    "gradient_checkpointing": "activation_checkpointing",  # works in 5.x, FutureWarning
    "gradient_checkpointing_kwargs": "activation_checkpointing_kwargs",  # works, FutureWarning
    "tokenizer": "processing_class",  # Trainer(tokenizer=) -> processing_class=
    "gradient_checkpointing_enable": "activation_checkpointing_enable",  # model method, FutureWarning
    "is_gradient_checkpointing": "is_activation_checkpointing",  # model property, FutureWarning
}
"""Names in the talk (transformers 4.x) -> names transformers 5.24 expects."""


def current_names(**kwargs: Any) -> dict[str, Any]:
    """The same arguments under the names the pinned transformers expects.

    ``current_names(evaluation_strategy="epoch", gradient_checkpointing=True)``
    -> ``{'eval_strategy': 'epoch', 'activation_checkpointing': True}``."""
    out: dict[str, Any] = {}
    for k, v in kwargs.items():
        new = TALK_TO_CURRENT.get(k, k)
        if new in out:
            raise ValueError(f"{k!r} and {new!r} name the same setting; pass only {new!r}")
        out[new] = v
    return out


# ----------------------------------------------------------------------------- data and metrics
class ClassificationDataset(torch.utils.data.Dataset):
    """Dict items (``input_ids``, ``attention_mask``, ``labels``) over in-memory tensors.

    ``record=True`` appends every index that is read to ``self.order``: the order a loader used."""

    def __init__(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor, *, record: bool = False
    ):
        if not len(input_ids) == len(attention_mask) == len(labels):
            raise ValueError("input_ids, attention_mask and labels need the same length")
        self.input_ids, self.attention_mask, self.labels = input_ids, attention_mask, labels
        self.record, self.order = record, []

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        if self.record:
            self.order.append(int(i))
        return {"input_ids": self.input_ids[i], "attention_mask": self.attention_mask[i], "labels": self.labels[i]}


def make_splits(
    n_train: int = 256, n_val: int = 128, *, max_len: int = 24, seed: int = 0, record: bool = True
) -> tuple[ClassificationDataset, ClassificationDataset]:
    """Train and validation splits of ``lab_utils.data.token_classification`` (label 1 iff a
    sequence holds more 'high' tokens than 'low' ones): a signal a tiny transformer can learn."""
    from lab_utils.data import token_classification

    if n_train < 1 or n_val < 1:
        raise ValueError(f"make_splits(n_train={n_train}, n_val={n_val}): both must be >= 1")
    ids, mask, labels = token_classification(n_train + n_val, max_len=max_len, seed=seed)
    train = ClassificationDataset(ids[:n_train], mask[:n_train], labels[:n_train], record=record)
    val = ClassificationDataset(ids[n_train:], mask[n_train:], labels[n_train:])
    return train, val


def accuracy_f1(predictions: Any, labels: Any) -> dict[str, float]:
    """Accuracy and F1 of the positive class (label 1), from class ids or from logits [n, classes].

    F1 = 2 TP / (2 TP + FP + FN); 0.0 when there is no positive prediction and no positive label."""
    preds, refs = np.asarray(predictions), np.asarray(labels).reshape(-1)
    if preds.ndim == 2:
        preds = preds.argmax(-1)
    preds = preds.reshape(-1)
    if preds.shape != refs.shape:
        raise ValueError(f"{preds.shape[0]} predictions for {refs.shape[0]} labels")
    tp = int(((preds == 1) & (refs == 1)).sum())
    fp = int(((preds == 1) & (refs != 1)).sum())
    fn = int(((preds != 1) & (refs == 1)).sum())
    denom = 2 * tp + fp + fn
    return {
        "accuracy": float((preds == refs).mean()) if refs.size else float("nan"),
        "f1": 2 * tp / denom if denom else 0.0,
    }


def compute_metrics(eval_pred: Any) -> dict[str, float]:
    """The Trainer's ``compute_metrics``: an ``EvalPrediction`` (logits, labels) -> accuracy and F1."""
    logits, labels = eval_pred[0], eval_pred[1]
    if isinstance(logits, (tuple, list)):
        logits = logits[0]
    return accuracy_f1(logits, labels)


def build_model(*, n_layer: int = 2, n_embd: int = 64, seed: int = 0, checkpointing: bool = False):
    """``lab_utils.models.tiny_classifier`` (GPT-2 from a config, 2 labels), offline."""
    offline()
    from lab_utils.models import tiny_classifier

    model = tiny_classifier(num_labels=2, n_layer=n_layer, n_embd=n_embd, seed=seed)
    if checkpointing:
        model.activation_checkpointing_enable()  # the talk's gradient_checkpointing_enable()
    return model


# ----------------------------------------------------------------------------- the Trainer's loss-scaling belief
def model_scales_loss_itself(model: torch.nn.Module) -> bool:
    """What the Trainer believes: True when ``forward`` takes ``**kwargs`` (or the model says
    ``accepts_loss_kwargs``), so it passes ``num_items_in_batch`` and does NOT divide the loss by
    the accumulation steps. Right for causal LMs; wrong for heads whose loss is a plain mean,
    such as GPT-2's sequence classifier: the gradient then comes out ``grad_accum`` times too big."""
    import inspect

    if hasattr(model, "accepts_loss_kwargs"):
        return bool(model.accepts_loss_kwargs)
    params = inspect.signature(model.forward).parameters.values()
    return any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params)


# ----------------------------------------------------------------------------- Trainer
def training_args(
    output_dir: str,
    *,
    batch_size: int,
    grad_accum: int,
    checkpointing: bool,
    epochs: int,
    lr: float,
    seed: int,
    max_grad_norm: float = 1.0,
    eval_each_epoch: bool = True,
    eval_batch_size: int = 64,
    **extra: Any,
):
    """``TrainingArguments`` with the current names and the quiet settings of the labs (no
    reports, no checkpoints on disk, no progress bars, plain AdamW as the Accelerate loop uses)."""
    offline()
    from transformers import TrainingArguments

    kw: dict[str, Any] = dict(
        output_dir=output_dir,
        per_device_train_batch_size=batch_size,
        per_device_eval_batch_size=eval_batch_size,
        gradient_accumulation_steps=grad_accum,
        activation_checkpointing=checkpointing,  # talk: gradient_checkpointing=True
        eval_strategy="epoch" if eval_each_epoch else "no",  # talk: evaluation_strategy="epoch"
        num_train_epochs=epochs,
        learning_rate=lr,
        seed=seed,
        max_grad_norm=max_grad_norm,
        optim="adamw_torch",
        lr_scheduler_type="linear",
        warmup_steps=0,
        weight_decay=0.0,
        logging_strategy="steps",
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        use_cpu=not torch.cuda.is_available(),  # talk: no_cuda=...
        dataloader_num_workers=0,
    )
    kw.update(current_names(**extra))
    return TrainingArguments(**kw)


def _meter_ctx(model: torch.nn.Module, on: bool):
    import contextlib

    if not on:
        return contextlib.nullcontext(None)
    from lab_utils.memory import SavedTensorMeter

    return SavedTensorMeter(model)


def run_trainer(
    *,
    n_train: int = 256,
    n_val: int = 128,
    max_len: int = 24,
    batch_size: int = 8,
    grad_accum: int = 4,
    checkpointing: bool = True,
    epochs: int = 2,
    lr: float = 1e-3,
    seed: int = 42,
    max_grad_norm: float = 1.0,
    eval_batch_size: int = 64,
    n_layer: int = 2,
    n_embd: int = 64,
    eval_each_epoch: bool = True,
    fix_loss_scaling: bool = True,
    meter_batches: int = 4,
    return_trainer: bool = False,
) -> dict[str, Any]:
    """Train the job with ``transformers.Trainer``; return what happened as plain data.

    ``micro_losses``: each micro-batch's loss (batch mean, before any scaling); ``step_losses``,
    ``grad_norms``, ``lrs``: per optimizer step, as the Trainer logged them; ``evals``: one dict
    per epoch (eval_loss, eval_accuracy, eval_f1); ``seconds`` / ``samples_per_second``: the
    Trainer's own train_runtime (evaluation included when it evaluates); ``saved_bytes``: the
    most bytes autograd kept for backward in one micro-batch (first ``meter_batches`` measured);
    ``cuda_peak_bytes``: the CUDA allocator peak of the whole train() (None on CPU).
    ``fix_loss_scaling=False`` leaves the Trainer's num_items_in_batch assumption in place."""
    offline()
    from transformers import Trainer
    from transformers.trainer_callback import PrinterCallback

    train_ds, val_ds = make_splits(n_train, n_val, max_len=max_len, seed=0)
    model = build_model(n_layer=n_layer, n_embd=n_embd, seed=0)
    believed = model_scales_loss_itself(model)
    if fix_loss_scaling:
        # GPT-2's classifier takes **kwargs but its loss is a plain mean that ignores
        # num_items_in_batch: tell the Trainer so it divides by the accumulation steps.
        model.accepts_loss_kwargs = False
    record: dict[str, list] = {"micro_losses": [], "saved": []}

    class MeteredTrainer(Trainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            on = model.training and len(record["saved"]) < meter_batches
            with _meter_ctx(model, on) as meter:
                out = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            if model.training:
                loss = out[0] if return_outputs else out
                record["micro_losses"].append(loss.detach().float().item())
                if meter is not None:
                    record["saved"].append(meter.total_bytes)
            return out

    cuda = torch.cuda.is_available()
    with tempfile.TemporaryDirectory(prefix="lab_hf_") as out_dir:
        args = training_args(
            out_dir,
            batch_size=batch_size,
            grad_accum=grad_accum,
            checkpointing=checkpointing,
            epochs=epochs,
            lr=lr,
            seed=seed,
            max_grad_norm=max_grad_norm,
            eval_each_epoch=eval_each_epoch,
            eval_batch_size=eval_batch_size,
        )
        trainer = MeteredTrainer(
            model=model,
            args=args,
            train_dataset=train_ds,
            eval_dataset=val_ds if eval_each_epoch else None,
            compute_metrics=compute_metrics,
        )
        trainer.remove_callback(PrinterCallback)  # logs stay in trainer.state.log_history
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        result = trainer.train()
        peak = torch.cuda.max_memory_allocated() if cuda else None
    logs = trainer.state.log_history
    steps = [h for h in logs if "loss" in h and "eval_loss" not in h]
    out = {
        "runner": "Trainer",
        "micro_losses": record["micro_losses"],
        "step_losses": [h["loss"] for h in steps],
        "grad_norms": [h.get("grad_norm") for h in steps],
        "lrs": [h["learning_rate"] for h in steps],
        "evals": [
            {k: h[k] for k in ("epoch", "eval_loss", "eval_accuracy", "eval_f1")} for h in logs if "eval_loss" in h
        ],
        "seconds": result.metrics["train_runtime"],
        "samples_per_second": result.metrics["train_samples_per_second"],
        "train_loss": result.metrics["train_loss"],
        "updates": trainer.state.global_step,
        "saved_bytes": max(record["saved"]) if record["saved"] else None,
        "cuda_peak_bytes": peak,
        "order": list(train_ds.order),
        "trainer_divides_loss": not model_scales_loss_itself(model),
        "model_claims_loss_kwargs": believed,
        "num_processes": 1,
        "config": dict(batch_size=batch_size, grad_accum=grad_accum, checkpointing=checkpointing),
    }
    if return_trainer:
        out["trainer"] = trainer
    reset_accelerate_state()  # the Trainer's Accelerator must not block notebook_launcher later
    return out


# ----------------------------------------------------------------------------- Accelerate
def run_accelerate(
    *,
    n_train: int = 256,
    n_val: int = 128,
    max_len: int = 24,
    batch_size: int = 8,
    grad_accum: int = 4,
    checkpointing: bool = True,
    epochs: int = 2,
    lr: float = 1e-3,
    seed: int = 42,
    max_grad_norm: float = 1.0,
    eval_batch_size: int = 64,
    n_layer: int = 2,
    n_embd: int = 64,
    expected_processes: int | None = None,
    cpu: bool | None = None,
    prepare_scheduler: bool = True,
    count_comm: bool | None = None,
    meter_batches: int = 4,
) -> dict[str, Any]:
    """The Trainer's job as an Accelerate loop (the talk's slide, plus what Trainer adds:
    gradient clipping, a linear schedule, evaluation each epoch). Works on 1 process or under a
    launcher; on several, ``count_comm`` (default: when distributed) records per micro-batch the
    collectives (``CommCounter``), the sync flag, inner optimizer steps and scheduler position.
    Returns the keys of ``run_trainer`` plus ``sync``, ``collectives``, ``optimizer_steps``,
    ``scheduler_steps``, ``rank``. ``expected_processes`` guards the silent one-process fallback;
    ``cpu`` (default: True unless every process can have its own GPU) goes to ``Accelerator(cpu=...)``."""
    offline()
    from accelerate import Accelerator, DataLoaderConfiguration
    from accelerate.utils import set_seed
    from transformers import get_linear_schedule_with_warmup

    from lab_utils.comm import CommCounter

    if cpu is None:  # a GPU per process, or all on the CPU (2 ranks on 1 GPU would both want cuda:0..1)
        world = int(os.environ.get("WORLD_SIZE", "1"))
        cpu = (torch.cuda.device_count() if torch.cuda.is_available() else 0) < world
    accelerator = Accelerator(
        gradient_accumulation_steps=grad_accum,
        cpu=cpu,
        # the Trainer's sampler: shuffled with seed + epoch, identical on every process
        dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True, data_seed=seed),
    )
    check_processes(accelerator, expected_processes)
    set_seed(seed)
    train_ds, val_ds = make_splits(n_train, n_val, max_len=max_len, seed=0)
    model = build_model(n_layer=n_layer, n_embd=n_embd, seed=0, checkpointing=checkpointing)
    train_dl = torch.utils.data.DataLoader(train_ds, batch_size=batch_size, shuffle=True)
    eval_dl = torch.utils.data.DataLoader(val_ds, batch_size=eval_batch_size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    # Count updates from the loader BEFORE prepare (all processes' batches): the prepared
    # scheduler steps num_processes times per update to match (the scheduler-stepping pitfall).
    total_updates = math.ceil(len(train_dl) / grad_accum) * epochs
    scheduler = get_linear_schedule_with_warmup(optimizer, 0, total_updates)
    if prepare_scheduler:
        model, optimizer, train_dl, eval_dl, scheduler = accelerator.prepare(
            model, optimizer, train_dl, eval_dl, scheduler
        )
    else:
        model, optimizer, train_dl, eval_dl = accelerator.prepare(model, optimizer, train_dl, eval_dl)
    inner_opt = optimizer.optimizer
    inner_sched = getattr(scheduler, "scheduler", scheduler)
    opt_steps = [0]
    inner_opt.register_step_post_hook(lambda *_: opt_steps.__setitem__(0, opt_steps[0] + 1))
    distributed = accelerator.num_processes > 1
    count_comm = distributed if count_comm is None else count_comm
    counter = CommCounter()
    if count_comm and isinstance(model, torch.nn.parallel.DistributedDataParallel):
        counter.attach(model)
    rec: dict[str, list] = {
        k: [] for k in ("micro_losses", "sync", "optimizer_steps", "scheduler_steps", "lrs_micro", "saved")
    }
    evals, step_lrs = [], []
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    import contextlib

    t0 = time.perf_counter()
    for epoch in range(epochs):
        model.train()
        for batch in train_dl:
            track = counter.track() if count_comm else contextlib.nullcontext()
            with track, accelerator.accumulate(model):
                on = len(rec["saved"]) < meter_batches
                with _meter_ctx(model, on) as meter:
                    loss = model(**batch).loss
                if meter is not None:
                    rec["saved"].append(meter.total_bytes)
                accelerator.backward(loss)  # divides by grad_accum
                if accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(model.parameters(), max_grad_norm)
                    step_lrs.append(float(inner_sched.get_last_lr()[0]))  # the lr of this update
                optimizer.step()  # skipped unless sync step
                scheduler.step()  # skipped unless sync step (if prepared)
                optimizer.zero_grad()
            rec["micro_losses"].append(loss.detach().float().item())
            rec["sync"].append(bool(accelerator.sync_gradients))
            rec["optimizer_steps"].append(opt_steps[0])
            rec["scheduler_steps"].append(int(inner_sched.last_epoch))
            rec["lrs_micro"].append(float(inner_sched.get_last_lr()[0]))
            counter.mark_step()
        evals.append(evaluate(accelerator, model, eval_dl, epoch + 1))
    seconds = time.perf_counter() - t0
    per_step = counter.summary()["per_step"] if count_comm else []
    n_micro = len(rec["micro_losses"])
    out = {
        "runner": "Accelerate",
        "micro_losses": rec["micro_losses"],
        "sync": rec["sync"],
        "optimizer_steps": rec["optimizer_steps"],
        "scheduler_steps": rec["scheduler_steps"],
        "lrs_micro": rec["lrs_micro"],
        "lrs": step_lrs,
        "evals": evals,
        "seconds": seconds,
        "samples_per_second": len(train_ds) * epochs / seconds,  # all processes together
        "updates": opt_steps[0],
        "saved_bytes": max(rec["saved"]) if rec["saved"] else None,
        "cuda_peak_bytes": torch.cuda.max_memory_allocated() if cuda else None,
        "order": list(train_ds.order),
        "collectives": [s["collectives"] for s in per_step][:n_micro],
        "comm_bytes": [s["bytes"] for s in per_step][:n_micro],
        "rank": accelerator.process_index,
        "num_processes": accelerator.num_processes,
        "device": str(accelerator.device),
        "config": dict(batch_size=batch_size, grad_accum=grad_accum, checkpointing=checkpointing),
    }
    accelerator.free_memory()
    del model, optimizer, scheduler, train_dl, eval_dl
    if not distributed and not _launched():
        reset_accelerate_state()  # leave the kernel as we found it
    return out


def _launched() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


@torch.no_grad()
def evaluate(accelerator: Any, model: torch.nn.Module, eval_dl: Any, epoch: int) -> dict[str, float]:
    """Eval loss (mean over samples, as the Trainer computes it), accuracy and F1, all processes."""
    model.eval()
    losses, preds, refs = [], [], []
    for batch in eval_dl:
        out = model(**batch)
        n = len(batch["labels"])
        loss, logits, labels = accelerator.gather_for_metrics(
            (out.loss.detach().repeat(n), out.logits.argmax(-1), batch["labels"])
        )
        losses.append(loss.float().cpu())
        preds.append(logits.cpu())
        refs.append(labels.cpu())
    m = accuracy_f1(torch.cat(preds).numpy(), torch.cat(refs).numpy())
    model.train()
    return {
        "epoch": float(epoch),
        "eval_loss": torch.cat(losses).mean().item(),
        "eval_accuracy": m["accuracy"],
        "eval_f1": m["f1"],
    }


def warm_up() -> float:
    """Pay the one-time costs of the first training step in this process (imports, kernel and
    checkpointing set-up) with a tiny Trainer run, so later timings measure the job. Seconds taken."""
    t0 = time.perf_counter()
    run_trainer(
        n_train=8,
        n_val=4,
        batch_size=4,
        grad_accum=2,
        epochs=1,
        eval_each_epoch=False,
        checkpointing=True,
        meter_batches=1,
    )
    return time.perf_counter() - t0


def window_means(micro_losses: list[float], grad_accum: int) -> list[float]:
    """Mean loss of each accumulation window: what the Trainer logs per update (logging_steps=1)."""
    return [
        sum(micro_losses[i : i + grad_accum]) / len(micro_losses[i : i + grad_accum])
        for i in range(0, len(micro_losses), grad_accum)
    ]


def loss_gap(a: Mapping[str, Any], b: Mapping[str, Any]) -> float:
    """Largest absolute difference between two runs' micro-batch losses (same length required)."""
    la, lb = list(a["micro_losses"]), list(b["micro_losses"])
    if len(la) != len(lb):
        raise ValueError(f"the runs saw {len(la)} and {len(lb)} micro-batches: not the same job")
    return max((abs(x - y) for x, y in zip(la, lb)), default=0.0)


# ----------------------------------------------------------------------------- exercise checks
def check_names_answer(answer: Mapping[str, Any] | None) -> None:
    """Exercise: the talk's TrainingArguments in today's names, without a single warning."""
    import warnings

    if answer is None:
        raise AssertionError("answer is None: write the keyword arguments as a dict")
    bad = [k for k in answer if k in TALK_TO_CURRENT]
    if bad:
        raise AssertionError(f"{bad} are the talk's names; see hf.TALK_TO_CURRENT for today's")
    from transformers import TrainingArguments

    with tempfile.TemporaryDirectory() as d, warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            args = TrainingArguments(output_dir=d, report_to="none", **dict(answer))
        except (TypeError, Warning) as e:
            raise AssertionError(f"TrainingArguments refused or warned: {e}") from None
    if str(args.eval_strategy.value) != "epoch":
        raise AssertionError("evaluation should run each epoch (eval_strategy)")
    if args.gradient_accumulation_steps != 4 or not args.activation_checkpointing:
        raise AssertionError("keep gradient_accumulation_steps=4 and turn checkpointing on")
    if not args.use_cpu and not torch.cuda.is_available():
        raise AssertionError("no GPU here: say so with use_cpu=True (the talk's no_cuda)")
    print("✓ TrainingArguments built with current names, no warning")
