"""Lab 7's mutations: one or more per claim its notebook checks (``claims`` names them,
"07/<id>" as the ledger at the top of ``labs/07_fsdp_accumulation`` lists them)."""

from __future__ import annotations

from tools.mutations.mutation import Mutation, notebook

NB = notebook("07_fsdp_accumulation")
HOLDINGS = "lab_utils/labs/lab07_fsdp/holdings.py"
TEST_HOLDINGS = "tests/labs/lab07_fsdp/test_holdings.py"

MUTATIONS: tuple[Mutation, ...] = (
    # zero-bytes: the formula, the meter, the taught run
    Mutation("ZeRO grads", HOLDINGS, '"grads": shard if stage >= 2 else param_bytes',
             '"grads": shard if stage >= 1 else param_bytes', "ZeRO-1 counted as sharding the gradients too",
             ("tests/core/test_plan.py", "-k", "zero_formula"), claims=("07/zero-bytes",)),
    Mutation("DTensor counted whole", HOLDINGS, 'return t.to_local() if hasattr(t, "to_local") else t', "return t",
             "a DTensor's bytes read at its global size, not the rank's local shard",
             (TEST_HOLDINGS, "-k", "sharded_rank_holds_half"), claims=("07/zero-bytes",)),
    Mutation("lab 7 optimizer before shard", NB,
             "    model = shard(fsdp.workload.model(width, depth), mesh)\n"
             "    opt = torch.optim.AdamW(model.parameters(), lr=LR)  # built on the shards",
             "    model = fsdp.workload.model(width, depth)\n"
             "    opt = torch.optim.AdamW(model.parameters(), lr=LR)\n"
             "    shard(model, mesh)",
             "the FSDP2 run's optimizer built on the parameters fully_shard then replaces", (NB,),
             claims=("07/zero-bytes",)),
    # fsdp2-traffic
    Mutation("lab 7 shard skips blocks", NB,
             "    for block in model:  # inner modules first\n"
             "        fully_shard(block, mesh=mesh, reshard_after_forward=reshard_after_forward)\n",
             "", "shard wraps the root only: one unit for the whole model", (NB,), claims=("07/fsdp2-traffic",)),
    # zero-paper
    Mutation("paper step sum", NB, "    piece.grad = mine / world ", "    piece.grad = mine ",
             "the reduce-scatter's sum stepped as if it were the mean over ranks",
             ("tests/labs/lab07_fsdp/test_zero.py", NB), claims=("07/zero-paper",)),
    Mutation("paper step slice", NB, "[rank * n : (rank + 1) * n]", "[:n]",
             "every rank steps the first slice, not its own", ("tests/labs/lab07_fsdp/test_zero.py", NB),
             claims=("07/zero-paper",)),
    # accum-exact, accum-trade
    Mutation("lab 7 sync toggle", NB, "set_requires_gradient_sync(i == k - 1)",
             "set_requires_gradient_sync(i == 0)", "update_sync_last syncs on the first micro-step, not the last",
             (NB,), claims=("07/accum-exact", "07/accum-trade")),
    Mutation("unsharded grads uncounted", HOLDINGS,
             "total = sum(local_bytes(p.grad) for p in model.parameters())\n    for fp in fsdp_params(model):",
             "total = sum(local_bytes(p.grad) for p in model.parameters())\n    for fp in []:",
             "held gradients read from .grad alone: FSDP2's unsharded ones (sync off) go uncounted",
             (TEST_HOLDINGS, "-k", "unsharded_gradients"), claims=("07/accum-trade",)),
    # reshard-trade
    Mutation("lab 7 reshard flag dropped", NB,
             "        fully_shard(block, mesh=mesh, reshard_after_forward=reshard_after_forward)",
             "        fully_shard(block, mesh=mesh)", "shard does not hand reshard_after_forward to the blocks",
             (NB,), claims=("07/reshard-trade",)),
    Mutation("gathered read from parameters", HOLDINGS,
             "return sum(t.untyped_storage().nbytes() for fp in fsdp_params(model) for t in fp.all_gather_outputs)",
             "return sum(local_bytes(p) for p in model.parameters())",
             "gathered bytes read from model.parameters(), which shows the shards once resharded",
             (TEST_HOLDINGS, "-k", "gathered_parameters"), claims=("07/reshard-trade",)),
    # hsdp-window
    Mutation("lab 7 HSDP toggle", NB, "model.set_requires_all_reduce(i == k - 1)",
             "model.set_requires_all_reduce(i == 0)", "the all-reduce across groups on the window's first micro-step",
             (NB,), claims=("07/hsdp-window",)),
    # ckpt-half (Going further)
    Mutation("saved-bytes identity", "lab_utils/memory/__init__.py", "key = storage._cdata  #",
             "key = storage.data_ptr()  #", "a saved storage known by its address: one FSDP2 freed and reused counts 0",
             ("tests/core/test_memory.py::test_a_new_storage_at_an_address_whose_first_storage_still_lives_is_counted",
              "tests/labs/lab07_fsdp/test_saved_meter.py"), claims=("07/ckpt-half",)),
    Mutation("lab 7 blocks not checkpointed", NB, "        model[i] = Checkpointed(block)",
             "        Checkpointed(block)", "checkpoint_blocks builds the wrappers, leaves the plain blocks in place",
             (NB,), claims=("07/ckpt-half",)),
)  # fmt: skip
