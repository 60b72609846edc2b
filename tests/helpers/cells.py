"""A lab's own functions for the tests, loaded from its notebook.

    ns = notebook_functions("02_gradient_accumulation", "large_batch")
    ns["large_batch"](model, optimizer, micro_batches, 4)

The lab's setup cells run first (its imports and constants), then only the ``def`` statements of
the named functions: the cells that also train or time something are not run. The functions live
in a namespace that is not an importable module, so ``launch`` sends them by value, like a cell's.
"""

from __future__ import annotations

import ast
from typing import Any

import nbformat

from tools.solutions import LABS


def notebook_functions(lab: str, *names: str) -> dict[str, Any]:
    """A namespace holding lab ``lab``'s setup and the functions ``names`` as its notebook defines them."""
    path = LABS / lab / f"{lab}.ipynb"
    nb = nbformat.read(path, as_version=4)
    ns: dict[str, Any] = {"__name__": f"{lab}_cells"}
    code = [c for c in nb.cells if c.cell_type == "code"]
    for cell in code:
        if "setup" in cell.metadata.get("tags", []):
            exec(compile(cell.source, f"<{path.name} setup>", "exec"), ns)
    found = set()
    for cell in code:
        for node in ast.parse(cell.source).body:
            if isinstance(node, ast.FunctionDef) and node.name in names:
                exec(compile(ast.Module([node], type_ignores=[]), f"<{path.name} {node.name}>", "exec"), ns)
                found.add(node.name)
    missing = set(names) - found
    assert not missing, f"{path.name} defines no {sorted(missing)}"
    return ns
