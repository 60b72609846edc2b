"""Lab 4's Accelerate loop as a take-home script: train, save a checkpoint, resume from it.

Standalone (torch, transformers and accelerate only), like Accelerate's own examples. Two
processes on one machine, CPU or GPU, from the repository root:

    # --multi_gpu selects accelerate's multi-process launcher (torchrun inside). Without a GPU
    # the script builds Accelerator(cpu=True), so the processes still join one group on the CPU.
    accelerate launch --multi_gpu --num_processes 2 --num_machines 1 --mixed_precision no \\
        --dynamo_backend no labs/04_trainer_to_accelerator/scripts/accelerate_job.py \\
        --processes 2 --output_dir ckpt --checkpoint_every 2

    # later, or after a crash: continue from the last saved state
    accelerate launch --multi_gpu --num_processes 2 ... \\
        labs/04_trainer_to_accelerator/scripts/accelerate_job.py --processes 2 --resume_from ckpt/step_2

    # torchrun works too
    torchrun --standalone --nproc_per_node=2 labs/04_trainer_to_accelerator/scripts/accelerate_job.py --processes 2

Pitfalls: ``accelerate launch --cpu --num_processes 2`` starts ONE process (its --cpu path is the
single-process launcher), and on CPU an Accelerator built without ``cpu=True`` leaves each process
training alone. ``--processes N`` (optional) makes the script stop with an explanation instead
of training quietly on the wrong number of processes; ``--no-cpu`` reproduces the second trap.

``accelerator.save_state`` writes the model, optimizer, scheduler, RNG states and the data
sampler's state to ``<output_dir>/step_<updates>``; ``--resume_from`` loads them, starts in the epoch
where those updates end (the sampler set to that epoch's order) and skips the micro-batches of that
epoch already trained on, so a resumed run ends where an uninterrupted one does, in any epoch. An
epoch ends its last window early when its micro-batches are not a multiple of ``--grad-accum``
(Accelerate syncs at the end of the loader).
The main process prints one JSON line (processes, losses, a checksum of the final weights) and
writes it to ``--out`` when given.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import re

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported: never reach the hub

import torch  # noqa: E402
from accelerate import Accelerator, DataLoaderConfiguration  # noqa: E402
from accelerate.utils import set_seed  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402
from transformers import GPT2Config, GPT2ForSequenceClassification, get_linear_schedule_with_warmup  # noqa: E402

VOCAB, SEQ = 128, 32


class HighLowTokens(Dataset):
    """Random token sequences of random length; label 1 when more tokens are "high" (>= 64)."""

    def __init__(self, n: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(1, VOCAB, (n, SEQ), generator=g)  # 0 is the pad token: padding only
        lengths = torch.randint(SEQ // 4, SEQ + 1, (n,), generator=g)
        self.mask = (torch.arange(SEQ)[None, :] < lengths[:, None]).long()
        self.ids = self.ids * self.mask  # pad with token 0
        self.labels = (2 * ((self.ids >= VOCAB // 2) & self.mask.bool()).sum(1) > lengths).long()

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "attention_mask": self.mask[i], "labels": self.labels[i]}


def build_model() -> GPT2ForSequenceClassification:
    """A tiny GPT-2 classifier from a config: random weights, dropout off, nothing downloaded."""
    config = GPT2Config(
        vocab_size=VOCAB, n_positions=SEQ, n_embd=64, n_layer=2, n_head=4, num_labels=2, pad_token_id=0,
        bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1, use_cache=False,  # GPT-2's 50256 is outside VOCAB
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )  # fmt: skip
    return GPT2ForSequenceClassification(config)


def check_processes(accelerator: Accelerator, expected: int | None) -> None:
    """Stop when the launcher gave fewer processes than you meant to start (the silent traps)."""
    if expected is None or accelerator.num_processes == expected:
        return
    env_world = os.environ.get("WORLD_SIZE")
    if env_world is not None and int(env_world) == expected:
        why = (
            f"the launcher started {env_world} processes but each one trains alone: without a GPU "
            f"build Accelerator(cpu=True) (or set ACCELERATE_USE_CPU=1)"
        )
    else:
        why = (
            f"`accelerate launch --cpu --num_processes {expected}` starts ONE process: use "
            f"`accelerate launch --multi_gpu --num_processes {expected}` or torchrun --nproc_per_node={expected}"
        )
    raise RuntimeError(f"expected {expected} processes, this Accelerator sees {accelerator.num_processes}: {why}")


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--processes", type=int, default=None, help="how many processes you launched (checked)")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--n-train", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--grad-accum", type=int, default=2)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--output_dir", default=None, help="where save_state writes step_<updates> folders")
    ap.add_argument("--checkpoint_every", type=int, default=0, help="save the state every N updates (0: never)")
    ap.add_argument("--resume_from", default=None, help="a step_<updates> folder written by save_state")
    ap.add_argument("--stop_after", type=int, default=0, help="stop after N updates (0: train to the end)")
    ap.add_argument("--no-cpu", action="store_true", help="Accelerator(cpu=False) even without a GPU (the trap)")
    ap.add_argument("--out", default=None, help="the main process also writes its JSON line here")
    a = ap.parse_args(argv)
    if a.checkpoint_every and not a.output_dir:
        ap.error("--checkpoint_every needs --output_dir (where to write the states)")

    world = int(os.environ.get("WORLD_SIZE", "1"))
    accelerator = Accelerator(
        gradient_accumulation_steps=a.grad_accum,
        cpu=False if a.no_cpu else torch.cuda.device_count() < world,  # a GPU per process, or all on the CPU
        dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True, data_seed=a.seed),
    )
    check_processes(accelerator, a.processes)
    set_seed(a.seed)
    model = build_model()
    model.activation_checkpointing_enable()
    train_dl = DataLoader(HighLowTokens(a.n_train, a.seed), batch_size=a.batch_size, shuffle=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.0)
    # sized by the single-process loader: the prepared scheduler steps num_processes times per update
    updates = math.ceil(len(train_dl) / a.grad_accum) * a.epochs
    scheduler = get_linear_schedule_with_warmup(optimizer, 0, updates)
    model, optimizer, train_dl, scheduler = accelerator.prepare(model, optimizer, train_dl, scheduler)

    done = 0  # updates already made
    if a.resume_from:
        accelerator.load_state(a.resume_from)  # model, optimizer, scheduler, RNG, sampler
        found = re.search(r"step_(\d+)$", a.resume_from.rstrip("/"))
        if not found:
            raise ValueError(f"--resume_from {a.resume_from!r}: expected a step_<updates> folder from save_state")
        done = int(found.group(1))
        accelerator.print(f"resumed from {a.resume_from}: {done} updates done")
    # this process's updates per epoch: the last window of an epoch may be short (a sync at the loader's end)
    per_epoch = math.ceil(len(train_dl) / a.grad_accum)
    start, done_in_epoch = divmod(done, per_epoch)
    losses = []
    for epoch in range(start, a.epochs):
        train_dl.set_epoch(epoch)  # the seedable sampler's order for this epoch, resumed or not
        skip = done_in_epoch * a.grad_accum if epoch == start else 0  # micro-batches already trained
        model.train()
        for batch in accelerator.skip_first_batches(train_dl, skip) if skip else train_dl:
            with accelerator.accumulate(model):
                loss = model(**batch).loss
                accelerator.backward(loss)  # divides by grad_accum
                if accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            losses.append(accelerator.gather(loss.detach()).mean().item())
            if accelerator.sync_gradients:
                done += 1
                if a.checkpoint_every and done % a.checkpoint_every == 0:
                    accelerator.save_state(os.path.join(a.output_dir, f"step_{done}"))
                if done == a.stop_after:
                    break
        if done == a.stop_after:
            break
        accelerator.print(f"epoch {epoch + 1}: {done} updates, last loss {losses[-1]:.4f}")

    weights = sum(p.double().sum() for p in accelerator.unwrap_model(model).parameters()).item()
    result = {"num_processes": accelerator.num_processes, "updates": done, "losses": losses, "checksum": weights}
    accelerator.print(json.dumps(result))
    if a.out and accelerator.is_main_process:
        with open(a.out, "w") as f:
            json.dump(result, f)
    # Free the DDP-wrapped model and its optimizer while the process group is still alive: if
    # the model's reducer drops the group's last reference at exit, gloo can deadlock (or abort)
    # in its teardown. Then leave together, and destroy the group.
    del model, optimizer, scheduler, train_dl
    accelerator.free_memory()
    gc.collect()
    accelerator.wait_for_everyone()
    accelerator.end_training()  # trackers closed, process group destroyed: a clean exit
    return result


if __name__ == "__main__":
    main()
