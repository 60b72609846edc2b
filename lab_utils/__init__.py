"""lab_utils: the shared, tested machinery behind the labs.

    import lab_utils
    lab_utils.launch(fn, world_size=2)        # real ranks from a notebook cell (launcher.py)
    lab_utils.CommCounter()                   # collectives and bytes (comm.py)
    lab_utils.simnet.LINKS["1GbE"]            # modelled links (simnet.py)

One concept per module (``launch``, ``comm``, ``memory``, ``stepmem``, ``overlap``, ``plan``...);
``topics/`` holds one package per lab: its topic code, figures and graders.
"""

from lab_utils import checks, data, env, errors, models, overlap, simnet, timing
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
    "errors",
    "models",
    "overlap",
    "simnet",
    "timing",
]
