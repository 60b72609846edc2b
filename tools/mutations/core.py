"""Mutations of the core instruments (``lab_utils`` outside ``lab_utils/labs``)."""

from __future__ import annotations

from tools.mutations.mutation import Mutation

MUTATIONS: tuple[Mutation, ...] = (
    Mutation("overlap queue", "lab_utils/netmodel.py", "start = max(b.ready_s, free)", "start = b.ready_s",
             "a bucket's transfer starts when it is ready, though the link still carries the last one",
             ("tests/core/test_netmodel_overlap.py",)),
    Mutation("ring cost", "lab_utils/netmodel.py", "+ 2 * (p - 1) / p * nbytes / link.bandwidth_Bps",
             "+ nbytes / link.bandwidth_Bps", "ring all-reduce's bandwidth term without the 2(p-1)/p factor",
             ("tests/core/test_netmodel.py",)),
    Mutation("saved-bytes meter", "lab_utils/memory/__init__.py", "nbytes = storage.nbytes()",
             "nbytes = t.numel()", "a tensor saved for backward counted as numel, not bytes",
             ("tests/core/test_memory.py",), claims=("07/ckpt-half",)),
    Mutation("memory calculator", "lab_utils/memory/shape.py", 'states = {"adamw": 2,', 'states = {"adamw": 1,',
             "AdamW's optimizer state predicted as one moment per parameter instead of two",
             ("tests/core/test_gpt2_bert.py",)),
    Mutation("comm bytes", "lab_utils/comm.py", "nbytes = sum(t.numel() * t.element_size() for t in tensors)",
             "nbytes = sum(t.numel() for t in tensors)", "a collective's payload counted as numel, not bytes",
             ("tests/core/test_comm.py",), claims=("07/fsdp2-traffic", "07/accum-trade", "07/hsdp-window")),
    Mutation("rank order", "lab_utils/launcher/__init__.py",
             "return [_read_result(workdir, r)[1] for r in range(world)]",
             "return [_read_result(workdir, r)[1] for r in reversed(range(world))]",
             "launch returns the ranks' results in another order than rank order",
             ("tests/core/test_launch.py", "-k", "rank_order"), claims=("00/real-ranks",)),
    Mutation("cmp's tolerance", "lab_utils/checks.py", '"close" if diff <= atol else', '"close" if diff <= 1e-3 else',
             "cmp ignores atol= and calls anything within a loose 1e-3 close",
             ("tests/core/test_core.py", "-k", "cmp"), claims=("07/ckpt-half",)),
)  # fmt: skip
