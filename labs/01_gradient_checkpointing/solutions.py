# %% [markdown]
# Solutions of lab 1, gradient checkpointing (`labs/01_gradient_checkpointing/01_gradient_checkpointing.ipynb`).
# Each cell below is one exercise cell of the lab with the answer filled in; the lab shows the
# same cell with the marked region stubbed out (`python -m tools.solutions sync`). Names such
# as `torch`, `checkpoint` and `CheckpointPolicy` come from the lab's setup cell.

# %% exercise="ckpt-every-k"
def forward_every_k(blocks, x, k):
    """Run the nn.Sequential `blocks` on x, each group of k consecutive blocks checkpointed."""
    ### BEGIN SOLUTION
    h = x
    for start in range(0, len(blocks), k):
        h = checkpoint(blocks[start : start + k], h, use_reentrant=False)
    return h
    ### END SOLUTION


# %% exercise="ckpt-hooks"
def checkpoint_by_hooks(fn, x):
    """Run fn(x) keeping nothing for backward but x; rebuild what backward needs, once, in backward."""
    ### BEGIN SOLUTION
    rebuilt = []  # the tensors fn saves, in the order it saves them, filled by the recompute

    def pack(t):  # forward: keep a number, drop the tensor
        pack.n += 1
        return pack.n - 1

    pack.n = 0

    def keep(t):
        rebuilt.append(t)
        return t

    def unpack(i):  # backward: the first tensor needed triggers one recompute of fn
        if not rebuilt:
            with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
                fn(x.detach().requires_grad_(x.requires_grad))
        return rebuilt[i]

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        return fn(x)
    ### END SOLUTION


# %% exercise="ckpt-predict"
# An MLP chain of 10 blocks, each Linear(128, 128) -> GELU, on a batch of 64 rows (float32),
# run with this plan: (start, stop, mode) segments, "full" = checkpointed, "store" = run as usual.
CHAIN = dict(n_blocks=10, width=128, rows=64)
PLAN = [(0, 4, "full"), (4, 6, "store"), (6, 7, "full"), (7, 8, "full"), (8, 10, "full")]
# How many bytes does the forward keep for backward (the batch itself not counted)?
### BEGIN SOLUTION
predicted_bytes = (2 * 2 + 3) * 64 * 128 * 4  # blocks 4, 5: input + Linear output; 3 segment inputs
### END SOLUTION


# %% exercise="ckpt-policy"
def budget_policy(census, budget):
    """A policy for one transformer block that keeps at most `budget` bytes of op outputs: those with
    the most FLOPs per byte (from the census rows of policies.op_census); everything else is recomputed."""
    ### BEGIN SOLUTION
    products = [r for r in census if r.flops > 0]  # pointwise ops: nothing to spare by caching them
    last = max(r.index for r in products)  # fc_out: early stop ends the replay before it
    keep, used = set(), 0
    for r in sorted(products, key=lambda r: -r.flops_per_byte):
        if r.index != last and used + r.out_bytes <= budget:  # a row that does not fit: skip it, go on
            keep.add(r.key)
            used += r.out_bytes

    def policy(ctx, op, *args, **kwargs):
        if policies.op_key(op, args) in keep:
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    return policy
    ### END SOLUTION
