"""How Accelerate's ``LocalSGD`` refuses an FSDP accelerator, read from the installed Accelerate at run time.

    code, accepted = refusal.local_sgd_check()   # LocalSGD.__init__'s check, the types it accepts
    code, switched = refusal.fsdp_switch()       # AcceleratorState's branch that turns FSDP on

Accelerate switches to FSDP only on accelerator devices, never for ``MULTI_CPU`` ranks, so a
CPU-only lab cannot build a real FSDP ``Accelerator``. Read from the source, a release that
changes either fact fails the lab's claim.
"""

from __future__ import annotations

import inspect
import re
import textwrap

__all__ = ["local_sgd_check", "fsdp_switch"]

_TYPE = re.compile(r"DistributedType\.(\w+)")


def _lines(source: str, start: str, end: str, after: int = 0) -> str:
    """The whole lines of ``source`` from the one containing ``start`` (searched from ``after``) to
    the one containing ``end``."""
    i = source.rindex("\n", 0, source.index(start, after)) + 1
    j = source.find("\n", source.index(end, i))
    return source[i : len(source) if j < 0 else j]


def local_sgd_check() -> tuple[str, list[str]]:
    """The check at the top of ``accelerate.local_sgd.LocalSGD.__init__`` (its source lines) and
    the ``DistributedType`` names it accepts."""
    from accelerate.local_sgd import LocalSGD

    code = textwrap.dedent(
        _lines(inspect.getsource(LocalSGD.__init__), "if accelerator.distributed_type not in", "raise ")
    )
    return code, _TYPE.findall(code[: code.index("]")])


def fsdp_switch() -> tuple[str, list[str]]:
    """The branch of ``AcceleratorState.__init__`` that sets ``DistributedType.FSDP``: its head
    (the device types it applies to), then the lines that switch to FSDP; and those type names."""
    from accelerate.state import AcceleratorState

    source = inspect.getsource(AcceleratorState.__init__)
    k = source.index("self.distributed_type = DistributedType.FSDP")
    head = _lines(
        source, "elif self.distributed_type in [", "]:", source.rindex("elif self.distributed_type in [", 0, k)
    )
    use = source.rindex("ACCELERATE_USE_FSDP", 0, k)
    switch = _lines(source, "ACCELERATE_USE_FSDP", "self.distributed_type = DistributedType.FSDP", use)
    indent = switch[: len(switch) - len(switch.lstrip())]
    code = textwrap.dedent(f"{head}\n{indent}...\n{switch}")
    return code, _TYPE.findall(head)
