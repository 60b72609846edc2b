"""lab_utils: the shared, tested machinery behind the labs.

    import lab_utils
    lab_utils.launch(fn, world_size=2)        # real ranks from a notebook cell (launcher.py)
    lab_utils.CommCounter()                   # collectives and bytes (comm.py)
    lab_utils.simnet.LINKS["1GbE"]            # modelled links (simnet.py)

Two layers. The instruments every lab shares, one concept per module: ``launch`` (real ranks;
``errors``: what it raises; ``warm_start``: how ranks start fast; ``_worker``: their side),
``run`` (torchrun entry point), ``comm`` (collectives counted), ``accelerate_meter`` (an
Accelerate loop metered from outside), ``simnet`` (link model),
``overlap`` (communication hidden behind the backward), ``memory`` (saved activations, peaks),
``stepmem`` (a step's memory predicted part by part; Llama-style decoders: ``stepmem_llama``),
``plan`` (``python -m lab_utils.plan``: the per-strategy plan for a model you bring),
``recompute`` (forward calls and FLOPs), ``timing``, ``models``, ``data`` (with the one
micro-batching rule), ``flat`` (many tensors as one vector), ``env`` (size,
device, rank, versions), ``checks`` (claims and exercise graders),
``plots`` (generic figure helpers), ``widgets``. Then ``topics/``: one
package per lab holding its topic code, its figures and its exercise graders
(``lab_utils.topics.ddp`` is lab 3's).
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
