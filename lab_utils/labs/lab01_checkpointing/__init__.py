"""Lab 1, gradient checkpointing: what a chain keeps for backward, what it recomputes, and plans.

    from lab_utils.labs.lab01_checkpointing import exercises, figures, measure, planner, policies, schedules
    act, inp, cost = measure.profile_blocks(model, x)             # measured, block by block
    plan = planner.plan_for_budget(act, inp, cost, budget)       # least recompute that fits

The checkpointed block, the chain's forward functions and the taught policy are lab cells, not code here.
"""

from lab_utils.labs import lazy

__all__ = ["alloc_timeline", "exercises", "figures", "measure", "offload", "planner", "policies", "schedules"]

__getattr__ = lazy(__name__, __all__)
