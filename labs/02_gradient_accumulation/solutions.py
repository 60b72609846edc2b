# %% [markdown]
# Solutions to the exercises of Lab 2, gradient accumulation by hand
# (`labs/02_gradient_accumulation/02_gradient_accumulation.ipynb`). The lab's exercise cells are these cells with each
# solution region replaced by a stub: `python -m tools.solutions sync` writes them.

# %% exercise="acc-norms"
### BEGIN SOLUTION
exact_layers = {"groupnorm", "rmsnorm", "dropout-eval"}
### END SOLUTION


# %% exercise="acc-tokens"
def token_accumulate(model, optimizer, stream, K):
    """Train on a stream of token micro-batches (loop over it once: no look-ahead, no len()), one
    optimizer step per K of them (the last window may be short), each equal to one large batch of
    the window's sequences."""
    ### BEGIN SOLUTION
    tokens, seen = 0, 0

    def step():
        for p in model.parameters():
            if p.grad is not None:
                p.grad /= tokens  # the gradient of the sum / the window's tokens = the gradient of its mean
        optimizer.step()
        optimizer.zero_grad()

    for mb in stream:
        accumulation.lm_token_loss_sum(model, mb).backward()  # a sum: its divisor is not known yet
        tokens, seen = tokens + accumulation.count_tokens(mb), seen + 1
        if seen == K:
            step()
            tokens, seen = 0, 0
    if seen:  # the short last window: divided by its own tokens
        step()
    ### END SOLUTION


# %% exercise="acc-clip"
def accumulate_with_clipping(model, optimizer, micro_batches, K, max_norm, scaler):
    """Train on windows of K micro-batches (x, y) (the last window may be short), with the loss
    F.mse_loss scaled by the gradient scaler, and clip the gradient norm to max_norm so that each
    update equals one clipped large batch."""
    ### BEGIN SOLUTION
    for window in accumulation.windows(micro_batches, K):
        for x, y in window:
            scaler.scale(F.mse_loss(model(x), y) / len(window)).backward()
        scaler.unscale_(optimizer)  # once: .grad now holds the window's true gradient
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)  # once, on the window's sum
        scaler.step(optimizer)  # sees the gradients are unscaled already
        scaler.update()
        optimizer.zero_grad()
    ### END SOLUTION


# %% exercise="acc-tf-port"
def tf_style_accumulate(model, micro_batches, loss_fn):
    """The TensorFlow accum_vars recipe in PyTorch. Return one buffer per parameter holding the
    accumulated gradient; never touch .grad (use torch.autograd.grad, as compute_gradients does)."""
    ### BEGIN SOLUTION
    params = [p for p in model.parameters() if p.requires_grad]
    accum_vars = [torch.zeros_like(p) for p in params]  # the recipe's buffers, zeroed (zero_ops)
    n_minibatches = len(micro_batches)
    for mb in micro_batches:
        grads = torch.autograd.grad(loss_fn(model, mb), params)  # compute_gradients
        for acc, g in zip(accum_vars, grads):
            acc.add_(g / n_minibatches)  # accum_ops; the recipe as published forgot "/ n_minibatches"
    return accum_vars
    ### END SOLUTION
