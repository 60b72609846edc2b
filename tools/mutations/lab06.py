"""Lab 6's mutations: one or more per claim its notebook checks (``claims`` names them,
"06/<id>" as the ledger at the top of ``labs/06_pipeline_gpipe`` lists them)."""

from __future__ import annotations

from tools.mutations.mutation import Mutation

MUTATIONS: tuple[Mutation, ...] = (
    Mutation("bubble formula", "lab_utils/labs/lab06_pipeline/timeline.py", "return (p - 1) / (m + p - 1)",
             "return (p - 1) / m", "GPipe's bubble as (p-1)/m instead of (p-1)/(m+p-1)",
             ("tests/labs/lab06_pipeline/test_timeline.py",)),
    Mutation("bubble split", "lab_utils/labs/lab06_pipeline/timeline.py",
             "return Idle(formula(p, m), (p - 1) * (2 * t_f + t_b) / (2 * step))",
             "return Idle(formula(p, m), formula(p, m))",
             "the whole of GPipe's bubble counted as blocked in a receive (no tail after the last send)",
             ("tests/labs/lab06_pipeline/test_timeline.py",)),
    Mutation("schedule tail", "lab_utils/labs/lab06_pipeline/timeline.py",
             "before_last = sum(max(e.end for e in ev) - t0 - busy_seconds(ev) for ev in stages)",
             "before_last = sum(t1 - t0 - busy_seconds(ev) for ev in stages)",
             "a stage's idle time after its last piece counted as waiting in a receive",
             ("tests/labs/lab06_pipeline/test_timeline.py",)),
)  # fmt: skip
