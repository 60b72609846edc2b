"""Lab 5, local SGD: the pieces the lab's cells share (the methods themselves are lab cells).

from lab_utils.labs import lab05_local_sgd as local_sgd
def section(steps):                                         # runs on every rank
    return {"H=8": local_sgd.run(train_local, steps=steps, H=8)}
runs = local_sgd.gather(launch(section, world_size=2, args=(64,)))
"""

from lab_utils.labs import lazy

_MODULES = ["accelerate_runs", "cost", "diloco", "exercises", "figures", "record", "study", "task"]
_NAMES = {"run": "record", "gather": "record", "Run": "record", "run_accelerate": "accelerate_runs"}
_NAMES.update({"compute_per_step": "cost", "elapsed_seconds": "cost"})
__all__ = [*_MODULES[1:], *_NAMES]  # accelerate_runs is reached through run_accelerate

__getattr__ = lazy(__name__, _MODULES, _NAMES)
