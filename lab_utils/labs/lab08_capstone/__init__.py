"""Lab 8 (plan your own run): the course's validated models applied to a model the student brings.

The planner itself is ``lab_utils.plan`` (``python -m lab_utils.plan``); the calculator ``lab_utils.memory.stepmem``.
"""

from lab_utils.labs import lazy

__all__ = ["exercises", "figures", "measure", "published"]

__getattr__ = lazy(__name__, __all__)
