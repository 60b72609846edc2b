"""Lab 1, gradient checkpointing: what a chain keeps for backward, what it recomputes, and plans.

    from lab_utils.topics.checkpointing import exercises, figures, measure, planner, policies, schedules
    act, inp, cost = measure.profile_blocks(model, x)             # measured, block by block
    plan = planner.plan_for_budget(act, inp, cost, budget)       # least recompute that fits
    rows = measure.compare_strategies(model, x, {"none": forward_plain, "every block": forward_every_block})
    figures.tradeoff(points, front=...)                          # the lab's plotly figures
    exercises.check_every_k(forward_every_k)                     # the exercise graders

Modules, one concept each:

- ``schedules``: segment schedules of a chain, as data (sqrt(N), checkpoint_sequential's);
- ``planner``: the position-aware cost model and the dynamic program (``plan_for_budget``,
  ``optimal_front``);
- ``timeline``: allocated bytes through one step, from the allocator's own events;
- ``policies``: selective-checkpointing policies, ``counted`` (which lets the memory meter see
  what a policy caches) and ``op_census`` (each op's output, FLOPs, and whether backward saves it);
- ``measure``: ``profile_blocks``, ``compare_strategies`` (measures forward functions it is
  given), ``results_table``, ``AliveActivations``;
- ``step_memory``: the parts of a step's memory that ``lab_utils.stepmem`` predicts, measured on a
  real step (``measure_anatomy``);
- ``figures``: the computation graph, the memory/recompute trade-off, the plan strip, the
  memory timeline;
- ``exercises``: the graders of the lab's exercises.

The checkpointed block, the chain's forward functions (one per strategy) and the policy the lab
teaches are notebook cells, not code here.
"""

from lab_utils.topics import lazy

__all__ = ["exercises", "figures", "measure", "planner", "policies", "schedules", "step_memory", "timeline"]

__getattr__ = lazy(__name__, __all__)
