"""Lab 7 (sharded data parallel, FSDP2, with accumulation and checkpointing): its instruments,
figures and exercise checks.

    from lab_utils import launch
    from lab_utils.topics import fsdp

    def shard(model, mesh): ...                       # the lab's cells hold the taught code
    fsdp.holdings.rank_bytes(model, optimizer)        # bytes this rank holds, measured
    fsdp.holdings.zero_bytes(p_bytes, world_size=4, stage=3)   # the ZeRO formula
    fsdp.traffic.per_op(counter.events)               # all-gathers / reduce-scatters counted
    fsdp.figures.holdings(held, param_bytes)
    fsdp.zero.paper_step(model, x, y, lr=1e-3)        # the ZeRO paper's stage-1/2 step (counted in the lab)
    fsdp.exercises.check_hsdp_windows(train_windows)

Modules (each loaded on first use, so ranks import only what they need):

- ``workload``: the model, data, micro-batches and large-batch reference every run shares;
- ``holdings``: bytes of parameters, gradients (FSDP2's unsharded ones too), optimizer state and
  all-gathered parameters a rank holds; the ZeRO formulas; ``MeteredBatches``, which measures
  between the micro-steps of an unchanged loop;
- ``traffic``: collectives per kind, bytes sent on a ring, modelled time on a link (overlapping
  the compute, with ``lab_utils.overlap``);
- ``zero``: one step as the ZeRO paper's stages 1 and 2 move it (reduce-scatter, all-gather);
- ``refusal``: the installed Accelerate's own source for why ``LocalSGD`` refuses FSDP;
- ``figures``: the lab's plotly figures;
- ``exercises``: the graders of the lab's exercises.
"""

from lab_utils.topics import lazy

__all__ = ["exercises", "figures", "holdings", "refusal", "traffic", "workload", "zero"]

__getattr__ = lazy(__name__, __all__)
