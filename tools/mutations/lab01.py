"""Lab 1's mutations: one or more per claim its notebook checks (``claims`` names them,
"01/<id>" as the ledger at the top of ``labs/01_gradient_checkpointing`` lists them)."""

from __future__ import annotations

from tools.mutations.mutation import Mutation

MUTATIONS: tuple[Mutation, ...] = (
    Mutation("planner", "lab_utils/labs/lab01_checkpointing/planner.py", "alive = k + seg_act + _out(inp, i)",
             "alive = k + inp[j] + _out(inp, i)", "a rebuilt segment's peak counted without its recomputed activations",
             ("tests/labs/lab01_checkpointing/test_planner.py",)),
)  # fmt: skip
