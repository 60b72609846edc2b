"""Lab 3's mutations: one or more per claim its notebook checks (``claims`` names them,
"03/<id>" as the ledger at the top of ``labs/03_ddp_no_sync`` lists them)."""

from __future__ import annotations

from tools.mutations.mutation import Mutation, notebook

NB = notebook("03_ddp_no_sync")

MUTATIONS: tuple[Mutation, ...] = (
    Mutation("lab 3 / k", NB, "loss = F.mse_loss(ddp_model(x), y) / k        # outside",
             "loss = F.mse_loss(ddp_model(x), y)        # outside", "no_sync_update's last micro-step without / k",
             (NB,)),
)  # fmt: skip
