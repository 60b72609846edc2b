"""settings: DDP's flags measured on 2 real ranks (the small model: three buckets at CAP)."""

from __future__ import annotations

import pytest

from lab_utils.labs.lab03_ddp import settings
from tests.labs.lab03_ddp.sizes import PARAM_BYTES

pytestmark = pytest.mark.usefixtures("no_orphans")


def test_first_iteration_buckets_and_search(runs):
    st = runs[0]["settings"]
    assert st.buckets == {
        "find_unused_parameters=False": [1, 3, 3],  # one bucket until the rebuild
        "find_unused_parameters=True": [3, 3, 3],  # bucketed from the start
        "static_graph=True": [1, 1, 3],  # the first iteration is recorded, rebuilt after the second
    }
    assert st.search_us["find_unused_parameters=False"] == 0 < st.search_us["find_unused_parameters=True"]


def test_gradients_as_bucket_views(runs):
    view = runs[0]["settings"].bucket_view
    assert view["gradient_as_bucket_view=False"] == settings.BucketView(PARAM_BYTES, PARAM_BYTES, grad_storages=8)
    assert view["gradient_as_bucket_view=True"].outside_buckets == 0
    assert view["gradient_as_bucket_view=True"].bucket_buffers == PARAM_BYTES  # measured in the hook


def test_bucket_views_save_one_gradient_copy_counted_by_the_allocator(runs):
    for rank in runs:  # bytes asked of the allocator: the same step gives the same count
        off, on = rank["settings"].step_memory
        assert (off.gradient_as_bucket_view, on.gradient_as_bucket_view) == (False, True)
        assert off.grad_bytes == on.grad_bytes == PARAM_BYTES
        assert off.kept_bytes == PARAM_BYTES and on.kept_bytes == 0  # the .grad tensors, or views into buckets
        assert off.peak_bytes - PARAM_BYTES <= on.peak_bytes <= off.peak_bytes


def test_compression_hooks(runs):
    hooks = runs[0]["settings"].hooks
    assert hooks["all-reduce (float32)"].bytes_per_update == [PARAM_BYTES] * 4
    assert hooks["all-reduce (float32)"].max_diff == 0.0
    fp16 = hooks["fp16_compress_hook"]
    assert fp16.bytes_per_update == [PARAM_BYTES // 2] * 4 and fp16.dtypes == ["float16"]
    assert 0 < fp16.max_diff < 1e-3
    power = hooks["PowerSGD rank 1"].bytes_per_update
    assert power[:2] == [PARAM_BYTES] * 2 and max(power[2:]) < PARAM_BYTES / 4
    ran = [h for h in hooks.values() if isinstance(h, settings.HookRun)]
    assert len(ran) == 3 and all(h.ranks_agree for h in ran)
    refused = hooks["bf16_compress_hook"]  # gloo (these tests run on CPU)
    assert isinstance(refused, settings.Refused) and "NCCL" in refused.message


def test_buffer_broadcast_follows_require_forward_param_sync(runs):
    rows = runs[0]["settings"].buffers
    assert [r.broadcast for r in rows] == [True, True, True, False, True]
    assert [r.flag_after for r in rows] == [True, True, False, True, True]
