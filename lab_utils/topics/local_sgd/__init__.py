"""Lab 5, local SGD: the pieces the lab's cells share. The methods themselves (local SGD, DDP,
post-local SGD, DiLoCo, Accelerate's LocalSGD loop) are written in the lab's cells.

    from lab_utils.topics import local_sgd
    def section(steps):                                         # runs on every rank
        return {"H=8": local_sgd.run(train_local, steps=steps, H=8)}
    runs = local_sgd.gather(launch(section, world_size=2, args=(64,)))
    local_sgd.figures.loss(runs)
    local_sgd.exercises.check_local_sgd(local_sgd_flat)

Modules:
    task             the model, the data, one shard of batches per rank, optimizers
    record           run(method, ...) on a rank: collectives counted, each step recorded; gather()
    accelerate_runs  run_accelerate(loop, ...): an Accelerate loop from a cell, counted (barriers too)
    cost             measured compute + modelled communication (the overlap model) = time on another network
    study            run_seeds(method, ...): several seeds trained as one; paired verdicts, the sign test
    diloco           DiLoCo's outer-step grid from a synchronous start; the stored study (load_stored)
    figures          the lab's plotly figures
    exercises        the graders of the lab's exercises
"""

from lab_utils.topics import lazy

_MODULES = ["accelerate_runs", "cost", "diloco", "exercises", "figures", "record", "study", "task"]
_NAMES = {"run": "record", "gather": "record", "Run": "record", "run_accelerate": "accelerate_runs"}
_NAMES.update({"compute_per_step": "cost", "elapsed_seconds": "cost"})
__all__ = [
    "cost",
    "diloco",
    "exercises",
    "figures",
    "record",
    "study",
    "task",
    "run",
    "gather",
    "Run",
    "run_accelerate",
    "compute_per_step",
    "elapsed_seconds",
]

__getattr__ = lazy(__name__, _MODULES, _NAMES)
