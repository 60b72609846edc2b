# %% [markdown]
# Solutions to the exercises of Lab 7, sharded data parallel (FSDP2) with accumulation and
# checkpointing (`labs/07_fsdp_accumulation/07_fsdp_accumulation.ipynb`). The lab's exercise cells are these cells with
# each solution region replaced by a stub: `python -m tools.solutions sync
# labs/07_fsdp_accumulation/07_fsdp_accumulation.ipynb` writes them.

# %% exercise="fsdp-bytes"
def predict_rank_bytes(model, world_size, rank):
    """Bytes that `rank` holds after one AdamW step when every block of `model` (and then the
    root) is fully_shard-ed over `world_size` ranks: {"params": ..., "grads": ..., "optimizer": ...}."""
    ### BEGIN SOLUTION
    local = 0
    for p in model.parameters():
        rows = p.shape[0]
        per_rank = -(-rows // world_size)  # torch.chunk: ceil(rows / W) rows for the first ranks
        mine = max(0, min(per_rank, rows - rank * per_rank))
        local += mine * (p.numel() // rows) * p.element_size()
    return {"params": local, "grads": local, "optimizer": 2 * local}
    ### END SOLUTION


# %% exercise="fsdp-gathers"
def update_fewer_gathers(model, optimizer, micro_batches):
    """One optimizer update over this rank's K micro-batches (x, y), each block all-gathered
    once per update (not twice per micro-step), gradients reduce-scattered once, and no gathered
    parameters left behind when the update is done."""
    ### BEGIN SOLUTION
    k = len(micro_batches)
    model.set_reshard_after_forward(False)  # gathered once, kept through backward...
    for i, (x, y) in enumerate(micro_batches):
        last = i == k - 1
        model.set_requires_gradient_sync(last)
        model.set_reshard_after_backward(last)  # ...and the next micro-steps; freed after the last
        (F.mse_loss(model(x), y) / k).backward()
    model.set_reshard_after_forward(True)  # back as fully_shard left the blocks (the root has no parameters)
    optimizer.step()
    optimizer.zero_grad()
    ### END SOLUTION


# %% exercise="fsdp-hsdp-windows"
def train_windows(model, optimizer, micro_batches, k):
    """Train an HSDP model (each block sharded within a replica group, replicated across groups)
    on this rank's micro-batches (x, y) in order: one optimizer step per window of k of them, the
    gradients reduce-scattered within the group at every micro-step and all-reduced across the
    groups once per window."""
    ### BEGIN SOLUTION
    for i, (x, y) in enumerate(micro_batches):
        last_of_window = (i + 1) % k == 0
        model.set_requires_all_reduce(last_of_window)  # across replicas: only at the window's end
        (F.mse_loss(model(x), y) / k).backward()
        if last_of_window:
            optimizer.step()
            optimizer.zero_grad()
    ### END SOLUTION
