# %% [markdown]
# Solutions of lab 5, local SGD (`labs/05_local_sgd/05_local_sgd.ipynb`). `python -m tools.solutions sync`
# writes the lab's exercise cells from this file, each solution replaced by a stub.


# %% exercise="lsgd-from-scratch"
def local_sgd_flat(model, opt, batches, H):
    """Local SGD on this rank: H steps without communication, then every parameter replaced by
    its mean over the ranks with ONE all_reduce; average once more at the end if the last steps
    were local. `batches`: a generator of (xb, yb), one per step (no len())."""
    ### BEGIN SOLUTION
    world = dist.get_world_size()

    def average():
        params = list(model.parameters())
        buf = torch.cat([p.data.flatten() for p in params])
        dist.all_reduce(buf)
        buf /= world
        torch.nn.utils.vector_to_parameters(buf, params)

    done = 0
    for xb, yb in batches:
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        done += 1
        if done % H == 0:
            average()
    if done % H:
        average()
    ### END SOLUTION


# %% exercise="lsgd-update-loop"
def update_loop(accelerator, model, optimizer, scheduler, dataloader, local_sgd_steps):
    """The guide's loop, but LocalSGD averages every `local_sgd_steps` optimizer UPDATES."""
    ### BEGIN SOLUTION
    with LocalSGD(accelerator=accelerator, model=model, local_sgd_steps=local_sgd_steps, enabled=True) as local_sgd:
        for inputs, targets in dataloader:
            with accelerator.accumulate(model):
                loss = F.cross_entropy(model(inputs), targets)
                accelerator.backward(loss)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
                if accelerator.sync_gradients:  # count updates, not micro-batches
                    local_sgd.step()
    ### END SOLUTION


# %% exercise="lsgd-outer-step"
def outer_step(anchor, averaged, momentum, lr, mu):
    """One DiLoCo outer step, in place: `anchor` (the global parameters before this round) moves,
    `momentum` (one buffer per tensor, zeros at first) is updated. `averaged` is the mean over the
    ranks of their parameters after H inner steps."""
    with torch.no_grad():
        ### BEGIN SOLUTION
        for a, avg, m in zip(anchor, averaged, momentum):
            g = a - avg  # the outer gradient: the way back from where the ranks went
            m.mul_(mu).add_(g)
            a.sub_(lr * (g + mu * m))  # Nesterov: look ahead along the momentum
        ### END SOLUTION
