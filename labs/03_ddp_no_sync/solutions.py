# %% [markdown]
# Solutions to the exercises of Lab 3, DDP `no_sync` on real ranks (`labs/03_ddp_no_sync/03_ddp_no_sync.ipynb`).
# The lab's exercise cells are these cells with each solution region replaced by a stub:
# `python -m tools.solutions sync labs/03_ddp_no_sync/03_ddp_no_sync.ipynb` writes them.

# %% exercise="ddp-accumulate"
def train_accumulating(ddp_model, optimizer, micro_batches, k):
    """Train on this rank's micro-batches in order: one optimizer step per k of them, the
    gradients all-reduced once per step."""
    ### BEGIN SOLUTION
    optimizer.zero_grad()
    for i, (x, y) in enumerate(micro_batches):
        if (i + 1) % k:  # not the last of its update: forward AND backward inside no_sync
            with ddp_model.no_sync():
                (F.mse_loss(ddp_model(x), y) / k).backward()
        else:  # the last one: its forward arms the reducer, its backward all-reduces once
            (F.mse_loss(ddp_model(x), y) / k).backward()
            optimizer.step()
            optimizer.zero_grad()
    ### END SOLUTION


# %% exercise="ddp-buckets"
# All-reduces per synchronised backward with bucket_cap_mb=0.001, after DDP's bucket rebuild:
### BEGIN SOLUTION
# Gradients become ready last layer first; a bucket closes once it holds >= 0.001 MiB (1,048 B):
# 4 + 1024 (1,028 B, still open) + 1024 | 262144 | 1024 + 262144 (three times) | 1024 + 32768.
# Six buckets. In registration order: 32768 | 1024 + 262144 (four times) | 1024 + 1024 | 4: seven.
n_allreduces = 6
### END SOLUTION


# %% exercise="ddp-fp16-hook"
def fp16_hook(state, bucket):
    """A DDP comm hook: average the bucket's gradients across ranks, sending them as float16."""
    ### BEGIN SOLUTION
    buffer = bucket.buffer()
    half = buffer.to(torch.float16).div_(dist.get_world_size())
    future = dist.all_reduce(half, async_op=True).get_future()

    def back_to_float32(fut):
        buffer.copy_(fut.value()[0])
        return buffer

    return future.then(back_to_float32)
    ### END SOLUTION


# %% exercise="ddp-hang"
def mean_loss(local_loss):
    """Every rank calls this with its own loss (a float); rank 0 returns the mean over all ranks."""
    ### BEGIN SOLUTION
    total = torch.tensor([float(local_loss)])
    dist.all_reduce(total)  # every rank reaches the collective...
    if dist.get_rank() == 0:  # ...and only the report is rank 0's
        return total.item() / dist.get_world_size()
    return None
    ### END SOLUTION


# %% exercise="ddp-script"
from lab_utils.labs.lab03_ddp.exercises import EPOCHS, K_SCRIPT, LR, MICRO_BATCH, script_data, script_model  # noqa: E402, F401


def ddp_script(checkpoint_path):
    """Run by torchrun on every rank: DDP training with no_sync accumulation, rank 0 checkpoints."""
    ### BEGIN SOLUTION
    dist.init_process_group("gloo")  # torchrun put the rank, world size and address in the environment
    model = DDP(script_model())
    dataset = TensorDataset(*script_data())
    sampler = DistributedSampler(dataset, shuffle=True, seed=0)  # this rank's share, shuffled
    loader = DataLoader(dataset, batch_size=MICRO_BATCH, sampler=sampler)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)  # a new order each epoch (the same on every rank)
        for i, (x, y) in enumerate(loader):
            last = (i + 1) % K_SCRIPT == 0
            with nullcontext() if last else model.no_sync():  # forward AND backward inside
                (F.mse_loss(model(x), y) / K_SCRIPT).backward()
            if last:
                optimizer.step()
                optimizer.zero_grad()
    if dist.get_rank() == 0:  # one writer
        torch.save(model.module.state_dict(), checkpoint_path)
    dist.destroy_process_group()
    ### END SOLUTION
