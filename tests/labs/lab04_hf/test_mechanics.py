"""hf.mechanics: what accelerator.backward does to a loss (the scheduler loops are lab 4 cells)."""

from __future__ import annotations

import pytest

from lab_utils.labs.lab04_hf import guards, mechanics


def test_backward_divides_by_accumulation_steps():
    for k in (2, 4):
        r = mechanics.backward_scaling(k)
        assert r.inside == pytest.approx(1 / k, rel=1e-5)
        assert r.outside == pytest.approx(1 / k, rel=1e-5)  # outside accumulate() too
        assert r.grad_accum == k
    assert not guards.accelerator_exists()
