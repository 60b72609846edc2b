"""Lab 3 (DDP ``no_sync``): the instruments of its runs, its figures and its exercise checks.

    from lab_utils import launch
    from lab_utils.labs import lab03_ddp as ddp

    def no_sync_update(ddp_model, optimizer, micro_batches): ...   # the lab's cells hold the loops
    res = launch(ddp.workload.train, 2, args=(no_sync_update, 4))   # counted on 2 real ranks
    ddp.figures.comm({"no_sync": res[0]})
    ddp.exercises.check_accumulate(train_accumulating)

Modules load on first use, so ranks import only what they run. ``workload`` and ``reducer``: the
counted loops and DDP's flags; ``buckets`` and ``settings``: DDP's settings measured (bucket
counts, first iterations, gradients as bucket views and their memory, comm hooks, buffers);
``calculator``: the time per update of a job you describe (modelled); ``stamps``: stamped ready
times and the K sweep with the overlap model on it; ``reallink``: that model against a real
shaped link, as stored (``real_link.json``, the earlier runs as ``real_link.<date>-<time>.json``;
the root-only measurement is ``tools/validate_link``, outside this package); ``figures``;
``exercises``: the graders, the torchrun script's included.
"""

from lab_utils.labs import lazy

__all__ = [
    "buckets",
    "calculator",
    "exercises",
    "figures",
    "reallink",
    "reducer",
    "settings",
    "stamps",
    "workload",
]

__getattr__ = lazy(__name__, __all__)
