"""The lab's two ways of training, as the notebook writes them, for the tests of the meters."""

from __future__ import annotations

import math
import os
import tempfile

import torch
from accelerate import Accelerator, DataLoaderConfiguration
from accelerate.utils import set_seed
from torch.utils.data import DataLoader
from transformers import Trainer, TrainingArguments, get_linear_schedule_with_warmup
from transformers.trainer_callback import PrinterCallback

from lab_utils.topics.hf import data, guards

TINY = dict(n_train=32, n_val=16, batch_size=4, grad_accum=2, epochs=1, lr=1e-3, seed=42)


def train_with_trainer(
    *, n_train, n_val, batch_size, grad_accum, epochs, lr, seed, checkpointing=True, fix=True, evaluate=True
):
    train_ds, val_ds = data.make_splits(n_train, n_val)
    model = data.build_model()
    if fix:
        model.accepts_loss_kwargs = False
    with tempfile.TemporaryDirectory() as out_dir:
        args = TrainingArguments(
            output_dir=out_dir,
            eval_strategy="epoch" if evaluate else "no",
            gradient_accumulation_steps=grad_accum,
            activation_checkpointing=checkpointing,
            per_device_train_batch_size=batch_size,
            per_device_eval_batch_size=64,
            num_train_epochs=epochs,
            learning_rate=lr,
            seed=seed,
            optim="adamw_torch",
            logging_steps=1,
            report_to="none",
            save_strategy="no",
            disable_tqdm=True,
            use_cpu=not torch.cuda.is_available(),
        )
        trainer = Trainer(
            model=model,
            args=args,
            train_dataset=train_ds,
            eval_dataset=val_ds if evaluate else None,
            compute_metrics=data.compute_metrics,
        )
        trainer.remove_callback(PrinterCallback)
        trainer.train()
    guards.reset_accelerate_state()
    return trainer, train_ds


def accelerate_loop(*, n_train, n_val, batch_size, grad_accum, epochs, lr, seed, expected_processes=None):
    world = int(os.environ.get("WORLD_SIZE", "1"))
    accelerator = Accelerator(
        gradient_accumulation_steps=grad_accum,
        cpu=torch.cuda.device_count() < world,
        dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True, data_seed=seed),
    )
    guards.check_processes(accelerator, expected_processes)
    set_seed(seed)
    train_ds, val_ds = data.make_splits(n_train, n_val)
    model = data.build_model()
    model.activation_checkpointing_enable()
    train_dl = DataLoader(train_ds, batch_size=batch_size, shuffle=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    scheduler = get_linear_schedule_with_warmup(optimizer, 0, math.ceil(len(train_dl) / grad_accum) * epochs)
    model, optimizer, train_dl, scheduler = accelerator.prepare(model, optimizer, train_dl, scheduler)
    losses = []
    for _ in range(epochs):
        model.train()
        for batch in train_dl:
            with accelerator.accumulate(model):
                loss = model(**batch).loss
                accelerator.backward(loss)
                if accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            losses.append(loss.item())
    return {"micro_losses": losses}
