"""Lab 5's mutations: one or more per claim its notebook checks (``claims`` names them,
"05/<id>" as the ledger at the top of ``labs/05_local_sgd`` lists them)."""

from __future__ import annotations

from tools.mutations.mutation import Mutation, notebook

NB = notebook("05_local_sgd")

MUTATIONS: tuple[Mutation, ...] = (
    Mutation("lab 5 /= world", NB, "        p.data /= world   ", "        pass  # /= world",
             "average_parameters sums the ranks' parameters and never divides", (NB,)),
)  # fmt: skip
