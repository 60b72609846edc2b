"""Lab 4's own cells for the tests: the Trainer setup and the loops, loaded from the notebook.

    ns = lab_functions("train_with_trainer", "accelerate_loop")
    trainer = ns["train_with_trainer"](train_ds, val_ds, epochs=1, lr=1e-3, **TINY)

The lab's setup cells run first (its imports and constants), then only the ``def`` statements of
the named functions: the cells that also train or time something are not run. The functions live
in a namespace that is not an importable module, so ``launch`` sends them by value, like a cell's.
"""

from __future__ import annotations

from typing import Any

from tests.helpers.cells import notebook_functions
from tools.solutions import LABS

NOTEBOOK = LABS / "04_trainer_to_accelerator" / "04_trainer_to_accelerator.ipynb"
TINY = dict(batch_size=4, grad_accum=2)  # 32 sequences: 8 micro-batches, 4 updates


def lab_functions(*names: str) -> dict[str, Any]:
    """A namespace holding the lab's setup and the functions ``names`` as the notebook defines them."""
    return notebook_functions(NOTEBOOK.parent.name, *names)
