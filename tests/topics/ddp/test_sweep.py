"""sweep: counted collectives per K, and the ring model on a link with round numbers."""

from __future__ import annotations

import pytest

from lab_utils.simnet import Link
from lab_utils.topics.ddp import sweep
from tests.topics.ddp.conftest import BY_HAND, PARAM_BYTES

pytestmark = pytest.mark.usefixtures("no_orphans")


def test_counts_and_simulation(runs):
    measured = runs[0]["sweep"]
    assert measured["loops"] == ["naive", "no_sync"]
    for row in measured["rows"]:
        assert len(row["naive_events"]) == 3 * row["k"] and len(row["no_sync_events"]) == 3
        assert sum(e["nbytes"] for e in row["no_sync_events"]) == PARAM_BYTES
        assert row["compute_s"] > 0
    link = Link("test", latency_s=1e-3, bandwidth_Bps=1e6)
    sim = sweep.simulated(measured, link)
    # Ring all-reduce on 2 ranks: 2 alpha + n / beta per bucket (three buckets, sizes by hand).
    one_round = sum(2e-3 + n / 1e6 for n in BY_HAND)
    for i, row in enumerate(measured["rows"]):
        assert sim["no_sync"][i] == pytest.approx(row["compute_s"] + one_round)
        assert sim["naive"][i] == pytest.approx(row["compute_s"] + row["k"] * one_round)


def test_loops_must_be_functions():
    with pytest.raises(TypeError, match="loops must map names"):
        sweep.measure({"naive": "naive"})
