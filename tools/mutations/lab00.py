"""Lab 0's mutations: one or more per claim its notebook checks (``claims`` names them,
"00/<id>" as the ledger at the top of ``labs/00_setup_check`` lists them)."""

from __future__ import annotations

from tools.mutations.mutation import Mutation

MUTATIONS: tuple[Mutation, ...] = (
)  # fmt: skip
