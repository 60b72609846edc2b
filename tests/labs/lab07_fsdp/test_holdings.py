"""holdings: bytes per rank measured on 2 real ranks (sizes by hand), and the ZeRO formulas."""

from __future__ import annotations

import pytest

from lab_utils.labs.lab07_fsdp import holdings
from tests.labs.lab07_fsdp.sizes import DEPTH, PARAM_BYTES, K

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_orphans")]


def test_zero_formulas_by_hand():
    assert holdings.zero_bytes(1200, world_size=4, stage=0) == {"params": 1200, "grads": 1200, "optimizer": 2400}
    assert holdings.zero_bytes(1200, world_size=4, stage=1) == {"params": 1200, "grads": 1200, "optimizer": 600}
    assert holdings.zero_bytes(1200, world_size=4, stage=2) == {"params": 1200, "grads": 300, "optimizer": 600}
    assert holdings.zero_bytes(1200, world_size=4, stage=3) == {"params": 300, "grads": 300, "optimizer": 600}
    assert holdings.zero_bytes(1200, world_size=4, stage=3, optimizer_states=1)["optimizer"] == 300


def test_zero_formulas_refuse_what_they_cannot_say():
    with pytest.raises(ValueError, match="stage=4"):
        holdings.zero_bytes(1200, world_size=4, stage=4)
    with pytest.raises(ValueError, match="does not divide by world_size=7"):
        holdings.zero_bytes(1200, world_size=7, stage=3)


def test_sharded_rank_holds_half(runs):
    for r in runs:
        assert r["before"] == {"params": PARAM_BYTES // 2, "grads": 0, "optimizer": 0}
        # after one AdamW step: the two moments of the local shard; the step counters are not counted
        assert r["after"] == {"params": PARAM_BYTES // 2, "grads": PARAM_BYTES // 2, "optimizer": PARAM_BYTES}


def test_unsharded_gradients_are_counted_while_sync_is_off(runs):
    # before micro-step 1, then after each: full (unsharded) gradients until the synced backward
    assert runs[0]["held"] == [0] + [PARAM_BYTES] * (K - 1) + [PARAM_BYTES // 2]


def test_metered_batches_mark_one_counter_step_per_micro_step(runs):
    steps = [e.step for e in runs[0]["events"] if e.op == "reduce_scatter_single"]
    assert steps == [K - 1] * DEPTH  # the last micro-step's backward, one per block
    assert {e.step for e in runs[0]["events"]} == set(range(K))


def test_gathered_parameters_counted_until_resharded(runs):
    assert runs[0]["gathered_after_forward"] == PARAM_BYTES
    assert runs[0]["shards_after_forward"] == PARAM_BYTES // 2  # the rank's own shard stays under the copy
    assert runs[0]["gathered_after_backward"] == 0
    assert runs[0]["plain_grads"] == 0  # an unsharded model, no backward yet
