"""lab_utils: the shared, tested machinery behind the labs.

    import lab_utils
    lab_utils.launch(fn, world_size=2)        # real ranks from a notebook cell (launch.py)
    lab_utils.CommCounter()                   # collectives and bytes (comm.py)
    lab_utils.simnet.LINKS["1GbE"]            # simulated links (simnet.py)

One concept per module: ``launch`` (processes), ``run`` (torchrun entry point), ``comm``
(communication counter), ``simnet`` (link model), ``memory`` (saved activations, CUDA peaks),
``recompute`` (forward calls and FLOPs), ``timing``, ``models``, ``data``, ``checks``, ``env``,
``plots`` (plotly figures for labs and slides), plus one module per lab topic.
"""

from lab_utils import checks, data, env, models, simnet, timing
from lab_utils.comm import CommCounter, CommEvent
from lab_utils.env import device, lab_size, pick, versions
from lab_utils.launch import (
    DistInfo,
    LaunchError,
    LaunchTimeout,
    RankDiedError,
    RankError,
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
    "LaunchError",
    "RankError",
    "RankDiedError",
    "LaunchTimeout",
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
    "simnet",
    "timing",
]
