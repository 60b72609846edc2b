"""lab_utils: the shared, tested machinery behind the labs.

    import lab_utils
    lab_utils.launch(fn, world_size=2)        # real ranks from a notebook cell (launcher/)
    lab_utils.CommCounter()                   # collectives and bytes (comm.py)
    lab_utils.netmodel.LINKS["1GbE"]          # modelled links and overlap (netmodel.py)

A thin core, one place per concept: ``launcher`` (real ranks), ``comm`` (collectives counted),
``netmodel`` (links and overlap), ``memory`` (meters and the step calculator), ``checks``,
``plots``, ``data``/``models``/``env``/``timing``; ``plan`` is lab 8's take-home planner
(``python -m lab_utils.plan``). ``labs/`` holds one package per lab, named by its number
(``labs.lab03_ddp``): its measurements, figures and graders. The core never imports a lab's
package, and no lab's package imports another's (``tests/test_architecture.py``).
"""

from lab_utils import checks, data, env, models, netmodel, timing
from lab_utils.comm import CommCounter, CommEvent
from lab_utils.env import device, lab_size, pick, versions
from lab_utils.launcher import (
    DistInfo,
    RankResults,
    dist_info,
    launch,
)

__version__ = "0.1.0"

__all__ = [
    "launch",
    "dist_info",
    "DistInfo",
    "RankResults",
    "CommCounter",
    "CommEvent",
    "pick",
    "lab_size",
    "device",
    "versions",
    "checks",
    "data",
    "env",
    "models",
    "netmodel",
    "timing",
]
