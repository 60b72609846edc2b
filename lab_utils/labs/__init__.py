"""One package per lab, named by its number: ``lab00_setup``, ``lab01_checkpointing``,
``lab02_accumulation``, ``lab03_ddp``, ``lab04_hf``, ``lab05_local_sgd``, ``lab06_pipeline``,
``lab07_fsdp``, ``lab08_capstone``; each holds the lab's measurements, its figures and its graders.

    from lab_utils.labs import lab03_ddp as ddp     # how a notebook names its lab's package

A lab's package imports the core (``lab_utils`` outside ``labs``), never another lab's package,
and the core never imports one (``tests/test_architecture.py``). Each loads its modules on first
use (``lazy``), so a rank imports no figures and no graders.
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
