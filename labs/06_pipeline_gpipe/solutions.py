# %% [markdown]
# Solutions to the exercises of Lab 6, pipelines (GPipe) on real ranks
# (`labs/06_pipeline_gpipe/06_pipeline_gpipe.ipynb`).
# The lab's exercise cells are these cells with each solution region replaced by a stub:
# `python -m tools.solutions sync labs/06_pipeline_gpipe/06_pipeline_gpipe.ipynb` writes them.


# %% exercise="pipe-fill-drain"
def gpipe_step(stage, inputs, targets):
    """One GPipe step on this rank's stage, for any number of stages: every forward, then every
    backward (in any order). Stage 0 reads inputs, the last stage computes the loss (mean squared
    error of each micro-batch, divided by m); the others only pass tensors along."""
    ### BEGIN SOLUTION
    rank, p, m = dist.get_rank(), dist.get_world_size(), len(inputs)
    first, last = rank == 0, rank == p - 1
    received, outputs = [], []
    for x, t in zip(inputs, targets):  # fill
        if not first:
            x = torch.empty_like(x)
            dist.recv(x, src=rank - 1)
            x.requires_grad_()
        y = stage(x)
        if last:
            y = F.mse_loss(y, t) / m
        else:
            dist.send(y.detach(), dst=rank + 1)
        received.append(x)
        outputs.append(y)
    for x, y in zip(received, outputs):  # drain
        if last:
            y.backward()
        else:
            grad = torch.empty_like(y)
            dist.recv(grad, src=rank + 1)
            y.backward(grad)
        if not first:
            dist.send(x.grad, dst=rank - 1)
    ### END SOLUTION


# %% exercise="pipe-balance"
def balance(costs, p):
    """Boundaries (p - 1 increasing block indices, each the first block of a stage) that split
    blocks with these costs into p contiguous stages whose most expensive stage is as cheap as
    possible."""
    ### BEGIN SOLUTION
    import itertools

    best, best_cuts = None, None
    for cuts in itertools.combinations(range(1, len(costs)), p - 1):
        edges = [0, *cuts, len(costs)]
        worst = max(sum(costs[a:b]) for a, b in zip(edges, edges[1:]))
        if best is None or worst < best:
            best, best_cuts = worst, list(cuts)
    return best_cuts
    ### END SOLUTION


# %% exercise="pipe-choose-m"
def choose_m(p, batch, bytes_per_sample, budget, max_bubble):
    """The smallest number of micro-batches m (a divisor of batch, at least p: torch's
    Schedule1F1B refuses fewer) for which the bubble (p - 1) / (m + p - 1) is at most max_bubble
    AND, under 1F1B, stage 0's activations in flight fit in budget bytes; None when no m does."""
    ### BEGIN SOLUTION
    for m in range(p, batch + 1):
        if batch % m:
            continue
        bubble = (p - 1) / (m + p - 1)
        in_flight = min(m, p) * (batch // m) * bytes_per_sample
        if bubble <= max_bubble and in_flight <= budget:
            return m
    return None
    ### END SOLUTION
