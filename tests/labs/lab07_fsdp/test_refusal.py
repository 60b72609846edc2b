"""refusal: Accelerate's own source, read at run time (fails when a release changes either fact)."""

from __future__ import annotations

import pytest

from lab_utils.labs.lab07_fsdp import refusal


def test_local_sgd_accepts_plain_data_parallel_only():
    code, accepted = refusal.local_sgd_check()
    assert code.startswith("if accelerator.distributed_type not in") and "raise NotImplementedError" in code
    assert {"NO", "MULTI_CPU", "MULTI_GPU"} <= set(accepted) and "FSDP" not in accepted


def test_fsdp_is_switched_on_for_accelerators_not_cpu_ranks():
    code, switched = refusal.fsdp_switch()
    assert "DistributedType.FSDP" in code and "fsdp_plugin is not None" in code
    assert "MULTI_GPU" in switched and "MULTI_CPU" not in switched


def test_a_real_fsdp_accelerator_type_is_refused_by_localsgd():
    from accelerate.local_sgd import LocalSGD
    from accelerate.utils import DistributedType

    class Stand:  # only distributed_type is read before the refusal
        distributed_type = DistributedType.FSDP

    with pytest.raises(NotImplementedError, match="LocalSGD is supported only"):
        LocalSGD(accelerator=Stand(), model=None, local_sgd_steps=2)
