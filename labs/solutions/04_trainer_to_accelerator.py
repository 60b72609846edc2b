# %% [markdown]
# Solutions to the exercises of Lab 4, from the Trainer to an Accelerate loop
# (`labs/04_trainer_to_accelerator.ipynb`). The lab's exercise cells are these cells with each
# solution region replaced by a stub: `python -m lab_utils.solutions sync` writes them.

# %% exercise="hf-names"
### BEGIN SOLUTION
answer = dict(
    eval_strategy="epoch",  # the talk: evaluation_strategy (removed: TypeError)
    gradient_accumulation_steps=4,
    activation_checkpointing=True,  # the talk: gradient_checkpointing (FutureWarning)
    use_cpu=not torch.cuda.is_available(),  # the talk's era: no_cuda (removed: TypeError)
)
### END SOLUTION


# %% exercise="hf-loop-from-args"
def loop_from_args(args, model, train_ds):
    """Train `model` on `train_ds` with an Accelerate loop, exactly as Trainer(model, args,
    train_dataset=train_ds).train() would; return the loss of every micro-batch, in order."""
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


# %% exercise="hf-by-hand"
def train_by_hand(accelerator, model, optimizer, batches):
    """What accumulate() does, written out: for each (x, y) in batches, backpropagate
    mse_loss(model(x), y) with accelerator.backward; the gradients of a window of
    accelerator.gradient_accumulation_steps micro-batches are all-reduced ONCE, at its end,
    and only then does the optimizer step and zero them. No accelerator.accumulate here."""
    ### BEGIN SOLUTION
    k = accelerator.gradient_accumulation_steps
    for i, (x, y) in enumerate(batches):
        sync = (i + 1) % k == 0
        # forward AND backward inside no_sync, or DDP all-reduces anyway
        with contextlib.nullcontext() if sync else accelerator.no_sync(model):
            accelerator.backward(torch.nn.functional.mse_loss(model(x), y))  # divides by k
        if sync:
            optimizer.step()
            optimizer.zero_grad()
    ### END SOLUTION


# %% exercise="hf-scaled-loss"
def scaled_loss(token_loss_sum, window_tokens, grad_accum):
    """The loss to hand accelerator.backward for one micro-batch of a window (see the text)."""
    ### BEGIN SOLUTION
    return token_loss_sum / window_tokens * grad_accum  # backward divides by grad_accum again
    ### END SOLUTION
