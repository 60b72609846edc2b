"""Each lab's topic code, one package per lab: its measurements, its figures and its exercise checks.

    from lab_utils.topics import checkpointing      # lab 1
    from lab_utils.topics import accumulation       # lab 2
    from lab_utils.topics import ddp                # lab 3
    from lab_utils.topics import hf                 # lab 4 (Trainer -> Accelerate)
    from lab_utils.topics import local_sgd          # lab 5
    from lab_utils.topics import pipeline           # lab 6 (pipelines, GPipe)
    from lab_utils.topics import fsdp               # lab 7 (FSDP2, accumulation, checkpointing)
    from lab_utils.topics import setup              # lab 0

The instruments every lab shares (launching ranks, counting collectives, modelled links, memory
and recompute meters, timing, tiny models and data, checks) stay one level up in ``lab_utils``.
A topic package may import those instruments, never another topic: each lab stands alone.
Every topic package loads its modules on first use (``lazy``), so a rank imports only what it
runs: no figures (plotly, ipywidgets) and no graders.
"""

import importlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any


def lazy(package: str, modules: Iterable[str], names: Mapping[str, str] | None = None) -> Callable[[str], Any]:
    """A package's ``__getattr__`` that imports its submodule ``modules`` on first use, and each of
    ``names`` (``{name: submodule}``) from its submodule: ``__getattr__ = lazy(__name__, [...])``."""
    modules, names = frozenset(modules), dict(names or {})

    def __getattr__(name: str) -> Any:
        if name in modules:
            return importlib.import_module(f"{package}.{name}")
        if name in names:
            return getattr(importlib.import_module(f"{package}.{names[name]}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}; it has {sorted(modules | names.keys())}")

    return __getattr__
