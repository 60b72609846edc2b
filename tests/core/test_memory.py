"""SavedTensorMeter and CUDA peaks against bytes computed by hand."""

import pytest
import torch
from torch.utils.checkpoint import checkpoint

from lab_utils.memory import CudaPeak, SavedTensorMeter, cpu_levels, cpu_peak, measure_step, note_saved
from lab_utils.models import mlp
from tests.helpers.chains import forward_every_block

B, W, N = 8, 32, 4
F32 = 4


def chain():
    return mlp(width=W, depth=N, seed=0), torch.randn(B, W)


def test_baseline_linear_gelu_chain_hand_bytes():
    # Each block keeps its input (for the weight grad of Linear) and the Linear output (for GELU).
    model, x = chain()
    with SavedTensorMeter(model) as m:
        model(x).sum()  # sum() keeps nothing for backward
    assert m.total_bytes == 2 * N * B * W * F32
    for i in range(N):
        assert m.by_module[f"{i}.linear"] == B * W * F32
        assert m.by_module[f"{i}.act"] == B * W * F32
    assert [r.shape for r in m.records if r.nbytes] == [(B, W)] * (2 * N)


def test_exclude_inputs_and_parameters():
    model, x = chain()
    with SavedTensorMeter(model, exclude=[x]) as m:
        model(x).sum()
    assert m.total_bytes == (2 * N - 1) * B * W * F32
    # Without the model the Linear weights (saved as transposed views, for the input grads)
    # count in full, except block 0's: its input x needs no gradient, so its weight is not saved.
    with SavedTensorMeter() as m2:
        model(x).sum()
    weights = (N - 1) * W * W * F32
    assert m2.total_bytes == 2 * N * B * W * F32 + weights


def test_every_block_checkpointed_keeps_block_inputs():
    # checkpoint(use_reentrant=False) stashes each region's input where the outer hooks see it;
    # what the blocks save inside the region is dropped.
    model, x = chain()
    with SavedTensorMeter(model) as m:
        h = x
        for blk in model:
            h = checkpoint(blk, h, use_reentrant=False)
        h.sum()
    assert m.total_bytes == N * B * W * F32
    with SavedTensorMeter(model) as m2:
        forward_every_block(model, x).sum()
    assert m2.total_bytes == m.total_bytes


def test_shared_storage_counted_once_and_views_count_whole_storage():
    a = torch.randn(16, 16, requires_grad=True)
    with SavedTensorMeter(exclude=[a]) as m:
        y = a.exp()  # exp saves its output y
        (y * y).sum()  # mul saves y twice: same storage
    assert m.total_bytes == 16 * 16 * F32
    assert len(m.records) == 3 and sum(r.nbytes > 0 for r in m.records) == 1
    with SavedTensorMeter(exclude=[a]) as m:
        big = a * 2.0  # mul by a scalar saves nothing
        big[:1].sin().sum()  # sin saves its input: a one-row view of `big`
    assert m.total_bytes == 16 * 16 * F32


def test_note_saved_outside_meter_is_noop_and_measure_step_cpu():
    note_saved(torch.ones(3), "nothing")
    model, x = chain()
    rep = measure_step(model, lambda: model(x).sum())
    assert rep.saved_bytes == 2 * N * B * W * F32
    assert all(p.grad is not None for p in model.parameters())
    if not torch.cuda.is_available():
        with CudaPeak() as peak:
            pass
        assert rep.peak_cuda_bytes is None and peak.bytes is None
    with pytest.raises(TypeError, match="return the loss tensor"):
        measure_step(model, lambda: 1.0)


def test_measure_step_counts_the_loss_only_inside_the_meter():
    model, x = chain()
    inside = measure_step(model, lambda: model(x).pow(2).sum())  # pow keeps the model's output
    out_bytes = model(x).numel() * F32
    assert inside.saved_bytes == 2 * N * B * W * F32 + out_bytes
    outside = measure_step(model, lambda: model(x), loss_of=lambda y: y.pow(2).sum())
    assert outside.saved_bytes == 2 * N * B * W * F32
    with pytest.raises(TypeError, match="loss_of\\(loss_fn\\(\\)\\) returned"):
        measure_step(model, lambda: model(x), loss_of=lambda y: None)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_peak_counts_allocations():
    n = 1 << 20
    with CudaPeak() as peak:
        torch.empty(n, device="cuda")
    assert peak.bytes == n * F32
    model = mlp(width=256, depth=4).cuda()
    x = torch.randn(128, 256, device="cuda")
    model(x).sum().backward()  # the first matmul allocates cuBLAS workspace, grads appear
    rep = measure_step(model, lambda: model(x).sum())
    with CudaPeak() as again:
        model(x).sum().backward()
    assert rep.peak_cuda_bytes >= rep.saved_bytes == 2 * 4 * 128 * 256 * F32
    assert again.bytes == rep.peak_cuda_bytes  # reset between measurements: same step, same peak


def test_cpu_peak_sees_a_known_allocation():
    n = 1 << 18
    keep = []
    assert cpu_peak(lambda: keep.append(torch.empty(n))) == n * F32
    # the final level: what fn left allocated (a temporary counts in the peak only)
    assert cpu_levels(lambda: keep.append(torch.empty(n) + torch.empty(n))) == (3 * n * F32, n * F32)
    # a step's peak holds at least what the forward saved for backward
    model, x = chain()
    rep = measure_step(model, lambda: model(x).sum(), profile_cpu=True)
    assert rep.peak_cpu_bytes >= rep.saved_bytes


def test_a_new_storage_at_a_freed_address_is_counted():
    """FSDP2 frees a block's gathered weights after its forward and the allocator hands their
    addresses to later activations: those are new storages, and their bytes count. The reuse is
    made certain here: two storages over one numpy buffer, the first gone before the second."""
    import numpy as np

    buf = np.ones(1024, dtype=np.float32)
    x = torch.ones(1024, requires_grad=True)
    with SavedTensorMeter() as meter:
        first = torch.from_numpy(buf)
        address = first.untyped_storage().data_ptr()
        y = x * first  # mul saves the other operand: `first`
        del y, first  # the graph and the first storage die
        second = torch.from_numpy(buf)
        assert second.untyped_storage().data_ptr() == address
        z = x * second
    assert [r.nbytes for r in meter.records] == [4096, 4096] and meter.total_bytes == 8192
    assert meter.kept_storages() == {(address, "cpu"): 8192}  # both storages, at the one address
    del z


def test_a_new_storage_at_an_address_whose_first_storage_still_lives_is_counted():
    """FSDP2 frees a gathered weight by resizing its storage to 0 bytes: the storage object lives on
    (its parameter holds it) while the allocator hands its address to a new activation. Made certain
    here with two storages over one numpy buffer, both alive: a meter that knew storages by their
    address would count the second as already seen."""
    import numpy as np

    buf = np.ones(1024, dtype=np.float32)
    x = torch.ones(1024, requires_grad=True)
    first = torch.from_numpy(buf)
    with SavedTensorMeter() as meter:
        y = x * first
        second = torch.from_numpy(buf)  # a second storage object at the same address, the first alive
        assert second.untyped_storage().data_ptr() == first.untyped_storage().data_ptr()
        z = x * second
    assert [r.nbytes for r in meter.records] == [4096, 4096]
    del y, z


def test_a_storage_saved_twice_while_alive_counts_once():
    x = torch.ones(1024, requires_grad=True)
    a = torch.ones(1024)
    with SavedTensorMeter() as meter:
        y = x * a
        z = x * a  # the same storage again: no new bytes
    assert [r.nbytes for r in meter.records] == [4096, 0]
    del y, z
