"""Lab 7's mutations: one or more per claim its notebook checks (``claims`` names them,
"07/<id>" as the ledger at the top of ``labs/07_fsdp_accumulation`` lists them)."""

from __future__ import annotations

from tools.mutations.mutation import Mutation, notebook

NB = notebook("07_fsdp_accumulation")

MUTATIONS: tuple[Mutation, ...] = (
    Mutation("saved-bytes identity", "lab_utils/memory/__init__.py", "key = storage._cdata  #",
             "key = storage.data_ptr()  #", "a saved storage known by its address: one FSDP2 freed and reused counts 0",
             ("tests/labs/lab07_fsdp/test_saved_meter.py",)),
    Mutation("ZeRO grads", "lab_utils/labs/lab07_fsdp/holdings.py", '"grads": shard if stage >= 2 else param_bytes',
             '"grads": shard if stage >= 1 else param_bytes', "ZeRO-1 counted as sharding the gradients too",
             ("tests/core/test_plan.py", "-k", "zero_formula")),
    Mutation("lab 7 sync toggle", NB, "set_requires_gradient_sync(i == k - 1)",
             "set_requires_gradient_sync(i == 0)", "update_sync_last syncs on the first micro-step, not the last",
             (NB,)),
)  # fmt: skip
