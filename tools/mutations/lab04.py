"""Lab 4's mutations: one or more per claim its notebook checks (``claims`` names them,
"04/<id>" as the ledger at the top of ``labs/04_trainer_to_accelerator`` lists them)."""

from __future__ import annotations

from tools.mutations.mutation import Mutation

MUTATIONS: tuple[Mutation, ...] = (
)  # fmt: skip
