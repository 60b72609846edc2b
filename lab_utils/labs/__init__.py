"""One package per lab: its measurements, figures and exercise graders (``setup`` is lab 0,
``checkpointing`` 1, ``accumulation`` 2, ``ddp`` 3, ``hf`` 4, ``local_sgd`` 5, ``pipeline`` 6,
``fsdp`` 7, ``plan`` 8).

A topic may import the shared instruments in ``lab_utils``, never another topic (each lab stands
alone), and loads its modules on first use (``lazy``), so a rank imports no figures and no graders.
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
