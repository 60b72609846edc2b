"""buckets: one bucket before the rebuild, the greedy packing after it (sizes added up by hand)."""

from __future__ import annotations

import pytest

from lab_utils.labs.lab03_ddp import buckets
from tests.labs.lab03_ddp.sizes import BY_HAND, CAP, EXACT_BY_HAND, EXACT_CAP, PARAM_BYTES

pytestmark = pytest.mark.usefixtures("no_orphans")


def test_buckets_rebuild_after_first_backward(runs):
    b = runs[0]["buckets"]
    assert b.param_bytes == [2048, 256, 16384, 256, 16384, 256, 256, 4]
    assert b.per_step["25"] == [1, 1, 1]
    assert b.per_step["None"] == [1, 1, 1]  # 33 KB: under the 1 MiB first bucket
    assert b.per_step[str(CAP)] == [1, 3, 3]  # one bucket until the rebuild
    assert b.bucket_bytes[str(CAP)][0] == [PARAM_BYTES]
    assert b.bucket_bytes[str(CAP)][1] == BY_HAND


def test_ddp_closes_a_bucket_at_exactly_its_cap(runs):
    # The greedy-buckets claim says "at least the cap": a cap the running total hits exactly, on DDP itself.
    b = runs[0]["buckets"]
    assert b.bucket_bytes[str(EXACT_CAP)][0] == [PARAM_BYTES]  # one bucket until the rebuild
    assert b.bucket_bytes[str(EXACT_CAP)][1] == b.bucket_bytes[str(EXACT_CAP)][2] == EXACT_BY_HAND
    assert buckets.predict(list(reversed(b.param_bytes)), int(EXACT_CAP * 2**20)) == EXACT_BY_HAND


def test_predict_by_hand():
    sizes = list(reversed([2048, 256, 16384, 256, 16384, 256, 256, 4]))
    assert buckets.predict(sizes, 16384) == BY_HAND
    assert buckets.predict(sizes, 516) == EXACT_BY_HAND
    assert buckets.predict(sizes, 10**9) == [PARAM_BYTES]
    assert buckets.predict([5, 5, 5, 5], 10, first_cap_bytes=5) == [5, 10, 5]
    with pytest.raises(ValueError, match="cap_bytes=0"):
        buckets.predict(sizes, 0)
