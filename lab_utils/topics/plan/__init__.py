"""Lab 8 (plan your own run): the course's validated models applied to a model the student brings.

    from lab_utils.topics import plan
    plan.measure.step_parts(shape)        # a scaled-down plan's step, measured part by part
    plan.exercises.check_...(...)         # the graders of the lab's exercises

The planner itself is an instrument (``lab_utils.plan``, also ``python -m lab_utils.plan``); the
step-memory calculator is ``lab_utils.stepmem``.

- ``measure``: a Llama-style decoder built offline from a shape; one step measured part by part;
  the process's own peak (VmHWM) of a step in a fresh interpreter;
- ``figures``: the lab's plotly figures;
- ``exercises``: the graders of the lab's exercises.
"""

from lab_utils.topics import lazy

__all__ = ["exercises", "figures", "measure"]

__getattr__ = lazy(__name__, __all__)
