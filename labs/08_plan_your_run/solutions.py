# %% [markdown]
# Solutions to the exercises of Lab 8, plan your own run (`labs/08_plan_your_run/08_plan_your_run.ipynb`). The lab's
# exercise cells are these cells with each solution region replaced by a stub:
# `python -m tools.solutions sync labs/08_plan_your_run/08_plan_your_run.ipynb` writes them.

# %% exercise="plan-copies"
def bf16_weight_copies(shape):
    """Bytes of the bf16 weight copies that one forward under bf16 autocast keeps for backward,
    for a Llama-style `stepmem.Shape` (2 bytes per parameter of every matmul's weight)."""
    ### BEGIN SOLUTION
    h, f = shape.hidden, shape.ffn_size
    kv = h // shape.heads * shape.n_kv_heads  # k and v project to kv_heads x head_dim
    per_layer = 2 * h * h + 2 * h * kv + 3 * h * f  # q, o; k, v; gate, up, down
    head = shape.vocab * h  # a matmul even when tied to the embedding
    return 2 * (shape.layers * per_layer + head)
    ### END SOLUTION


# %% exercise="plan-fit"
def cheapest_fit(shape, budget):
    """(accumulation K, checkpointing) of the cheapest way to train `shape` on one device of
    `budget` bytes: the fewest micro-batches without checkpointing whose predicted peak fits,
    else the fewest with checkpointing."""
    ### BEGIN SOLUTION
    for ckpt in (False, True):
        for k in range(1, shape.batch + 1):
            if shape.batch % k:
                continue
            s = dataclasses.replace(shape, accumulation=k, checkpointing=ckpt)
            if stepmem.predict(s).peak <= budget:
                return k, ckpt
    raise ValueError(f"nothing fits {budget} bytes")
    ### END SOLUTION


# %% exercise="plan-scale"
def scale_down(big):
    """A `stepmem.Shape` of the same architecture as `big` (precision, heads, key/value heads,
    FFN / hidden, optimizer, tied head kept), small enough that its predicted peak fits
    `exercises.CPU_BUDGET`: what a CPU can run to check the plan's memory model."""
    ### BEGIN SOLUTION
    step = big.heads * (2 if big.arch == "llama" else 1)  # a Llama head's size must be even (rotary)
    factor = 1
    while True:
        hidden = max(step, big.hidden // factor // step * step)
        small = dataclasses.replace(
            big,
            hidden=hidden,
            ffn=round(big.ffn_size * hidden / big.hidden),
            layers=max(1, big.layers // factor),
            vocab=max(64, big.vocab // factor),
            seq=max(16, big.seq // factor),
            batch=max(1, min(big.batch, 4)),
            accumulation=1,
            positions=max(16, big.seq // factor),
        )
        if stepmem.predict(small).peak <= exercises.CPU_BUDGET:
            return small
        factor *= 2
    ### END SOLUTION
