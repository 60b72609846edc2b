"""Lab 2's mutations: one or more per claim its notebook checks (``claims`` names them,
"02/<id>" as the ledger at the top of ``labs/02_gradient_accumulation`` lists them)."""

from __future__ import annotations

from tools.mutations.mutation import Mutation, notebook

NB = notebook("02_gradient_accumulation")

MUTATIONS: tuple[Mutation, ...] = (
    Mutation("summed loss", "lab_utils/labs/lab02_accumulation/losses.py", ".flatten(1).mean(1).sum()",
             ".flatten(1).mean(1).mean()", "mse_sum returns the batch's mean, not its sum over samples",
             ("tests/labs/lab02_accumulation/test_losses.py",)),
    Mutation("lab 2 / K", NB, "loss = F.mse_loss(model(xb), yb) / K   #",
             "loss = F.mse_loss(model(xb), yb)   #", "plain_loop without / K: .grad holds K times the mean",
             (NB,)),
)  # fmt: skip
