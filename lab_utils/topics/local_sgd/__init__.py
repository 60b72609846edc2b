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
    cost             measured compute + simulated communication (the overlap model) = time on another network
    study            run_seeds(method, ...): several seeds trained as one; paired verdicts, the sign test
    diloco           DiLoCo's outer-step grid from a synchronous start; the stored study (load_stored)
    figures          the lab's plotly figures
    exercises        the graders of the lab's exercises
"""

from lab_utils.topics.local_sgd import cost, diloco, exercises, figures, record, study, task
from lab_utils.topics.local_sgd.accelerate_runs import run_accelerate
from lab_utils.topics.local_sgd.cost import compute_per_step, simulated_seconds
from lab_utils.topics.local_sgd.record import Run, gather, run

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
    "simulated_seconds",
]
