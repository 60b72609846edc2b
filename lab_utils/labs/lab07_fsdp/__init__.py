"""Lab 7 (sharded data parallel, FSDP2, with accumulation and checkpointing): its instruments,
figures and exercise checks.

    from lab_utils.labs import lab07_fsdp as fsdp
    fsdp.holdings.rank_bytes(model, optimizer)        # bytes this rank holds, measured
    fsdp.holdings.zero_bytes(p_bytes, world_size=4, stage=3)   # the ZeRO formula
    fsdp.traffic.per_op(counter.events)               # all-gathers / reduce-scatters counted
    fsdp.exercises.check_hsdp_windows(train_windows)

Modules load on first use, so ranks import only what they run (never ``figures``).
"""

from lab_utils.labs import lazy

__all__ = ["exercises", "figures", "holdings", "refusal", "traffic", "workload"]

__getattr__ = lazy(__name__, __all__)
