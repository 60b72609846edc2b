"""Lab 0's mutations: one or more per claim its notebook checks (``claims`` names them,
"00/<id>" as the ledger at the top of ``labs/00_setup_check`` lists them)."""

from __future__ import annotations

from tools.mutations.mutation import Mutation, notebook

NB = notebook("00_setup_check")

MUTATIONS: tuple[Mutation, ...] = (
    Mutation("pin moved", "pyproject.toml", '"accelerate==1.15.*",', '"accelerate==1.14.*",',
             "a pin moved on and the environment was not reinstalled", (NB,), claims=("00/pinned-stack",)),
    Mutation("pin read loosely", "lab_utils/env.py", "if have not in SpecifierSet(spec, prereleases=True):",
             "if have.split('.')[0] not in spec:", "a version compared with its pin by the major number only",
             ("tests/core/test_environment.py", "-k", "off_pins"), claims=("00/pinned-stack",)),
    Mutation("lab 0 no all_reduce", NB, "    dist.all_reduce(t)                         #",
             "    pass                         #", "contribute_and_sum without its collective: each rank keeps its own",
             (NB,), claims=("00/real-ranks",)),
    Mutation("blame rank 0", "lab_utils/launcher/__init__.py", "raise RankError(rank, exc_type, message, tb)",
             "raise RankError(0, exc_type, message, tb)", "a failing rank's error blamed on rank 0",
             ("tests/core/test_launch.py", "-k", "raising_rank"), claims=("00/rank-error",)),
)  # fmt: skip
