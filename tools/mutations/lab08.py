"""Lab 8's mutations: one or more per claim its notebook checks (``claims`` names them,
"08/<id>" as the ledger at the top of ``labs/08_plan_your_run`` lists them)."""

from __future__ import annotations

from tools.mutations.mutation import Mutation

MUTATIONS: tuple[Mutation, ...] = (
)  # fmt: skip
