# %% [markdown]
# Solutions to the exercises of Lab 4, from the Trainer to an Accelerate loop
# (`labs/04_trainer_to_accelerator/04_trainer_to_accelerator.ipynb`). The lab's exercise cells are these cells with each
# solution region replaced by a stub: `python -m tools.solutions sync` writes them.

# %% exercise="hf-loop-from-args"
def loop_from_args(args, model, train_ds):
    """Train `model` on `train_ds` with an Accelerate loop, exactly as section 1's corrected
    Trainer (trainer.loss_is_scaled_for_ga = False) would; return the loss of every micro-batch,
    in order."""
    ### BEGIN SOLUTION
    accelerator = Accelerator(
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        cpu=args.use_cpu,
        dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True, data_seed=args.seed),
    )
    set_seed(args.seed)
    if args.activation_checkpointing:
        model.activation_checkpointing_enable()
    train_dl = DataLoader(train_ds, batch_size=args.per_device_train_batch_size, shuffle=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate, weight_decay=args.weight_decay)
    updates = math.ceil(len(train_dl) / args.gradient_accumulation_steps) * int(args.num_train_epochs)
    scheduler = get_scheduler(args.lr_scheduler_type, optimizer, args.warmup_steps, updates)
    model, optimizer, train_dl, scheduler = accelerator.prepare(model, optimizer, train_dl, scheduler)
    losses = []
    model.train()
    for _ in range(int(args.num_train_epochs)):
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
    ### END SOLUTION


# %% exercise="hf-own-loss"
CLASS_WEIGHTS = torch.tensor([1.0, 3.0])  # class 1 counts three times as much


class WeightedLossTrainer(Trainer):
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        """Cross-entropy weighted by CLASS_WEIGHTS, a mean over this micro-batch (what
        torch.nn.functional.cross_entropy(logits, labels, weight=...) returns); the Trainer must
        divide it by the accumulation steps exactly once (section 3)."""
        ### BEGIN SOLUTION
        self.loss_is_scaled_for_ga = False  # a per-micro-batch mean: the Trainer divides it
        labels = inputs["labels"]
        outputs = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"])
        weight = CLASS_WEIGHTS.to(outputs.logits.device)
        loss = torch.nn.functional.cross_entropy(outputs.logits, labels, weight=weight)
        return (loss, outputs) if return_outputs else loss
        ### END SOLUTION


# %% exercise="hf-window-loss"
def window_loss(accelerator, token_loss_sum, window_tokens):
    """The loss to hand accelerator.backward for one micro-batch: `token_loss_sum` is the sum of its
    token losses, `window_tokens` this rank's target tokens in the whole window (a tensor), so that
    the window's gradient, on every rank, is one big batch's over all ranks' tokens."""
    ### BEGIN SOLUTION
    all_tokens = accelerator.gather(window_tokens).sum()  # the window's count over every rank
    # accelerator.backward divides by the accumulation steps, DDP averages over the ranks: undo both
    return token_loss_sum * accelerator.gradient_accumulation_steps * accelerator.num_processes / all_tokens
    ### END SOLUTION
