"""CommCounter: counts DDP bucket all-reduces and direct collectives, bytes computed by hand."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from lab_utils import CommCounter, launch
from lab_utils.netmodel import LINKS, comm_seconds

pytestmark = pytest.mark.usefixtures("no_orphans")


def ddp_counts(k: int, use_no_sync: bool):
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.Linear(4, 1))  # 36 + 5 params
    ddp = DDP(model, bucket_cap_mb=25)
    counter = CommCounter().attach(ddp)
    x = torch.randn(k * 4, 8)
    for _update in range(2):
        for micro in range(k):
            sync = (micro == k - 1) or not use_no_sync
            ctx = ddp.no_sync() if not sync else torch.enable_grad()
            with ctx:
                ddp(x[micro * 4 : (micro + 1) * 4]).sum().backward()
        counter.mark_step()
    with counter.track():
        for p in model.parameters():
            dist.all_reduce(p.data)  # parameter averaging, as local SGD does
        dist.broadcast(torch.zeros(10, dtype=torch.float64), src=0)
    summary = counter.summary()
    everyone = counter.gather()
    in_backward = {e.source: e.in_backward for e in counter.events}
    del ddp, model
    return summary, [len(e) for e in everyone], in_backward


def test_no_sync_cuts_bucket_all_reduces_k_fold():
    naive, sync = launch(ddp_counts, 2, args=(4, False)), launch(ddp_counts, 2, args=(4, True))
    s_naive, s_sync = naive[0][0], sync[0][0]
    param_bytes = (8 * 4 + 4 + 4 * 1 + 1) * 4  # 41 float32 parameters, one bucket
    # Steps 0 and 1 are the two updates; step 2 holds the direct collectives.
    assert [s["collectives"] for s in s_naive["per_step"][:2]] == [4, 4]
    assert [s["collectives"] for s in s_sync["per_step"][:2]] == [1, 1]
    assert s_sync["per_step"][0]["bytes"] == param_bytes
    assert s_naive["per_step"][0]["bytes"] == 4 * param_bytes
    # Direct calls: 4 parameter tensors (all_reduce) + one broadcast of 10 float64.
    assert s_sync["per_step"][2] == {"collectives": 5, "bytes": param_bytes + 80}
    assert s_sync["by_op"] == {"all_reduce": 2 + 4, "broadcast": 1}
    # gather() returns both ranks' events and is not counted itself.
    assert sync[0][1] == sync[1][1] == [s_sync["collectives"]] * 2
    # the bucket all-reduces ran inside backward(), the direct ones after it
    assert sync[0][2] == {"ddp-hook": True, "torch.distributed": False}


def test_track_restores_torch_distributed():
    before = dist.all_reduce
    with CommCounter().track():
        assert dist.all_reduce is not before
    assert dist.all_reduce is before


def test_attach_needs_ddp():
    with pytest.raises(TypeError, match="DistributedDataParallel"):
        CommCounter().attach(torch.nn.Linear(2, 2))


def test_summary_and_modelled_seconds_of_recorded_events():
    c = CommCounter()
    c._record("all_reduce", 1000, 250, "float32", "test")
    c.mark_step()
    c.mark_step()
    c._record("all_reduce", 4000, 1000, "float32", "test")
    s = c.summary()
    assert s["per_step"] == [
        {"collectives": 1, "bytes": 1000},
        {"collectives": 0, "bytes": 0},
        {"collectives": 1, "bytes": 4000},
    ]
    link = LINKS["1GbE"]
    secs = comm_seconds(c.events, link, world_size=2)
    assert secs[1] == 0.0
    assert secs[0] == pytest.approx(2 * link.latency_s + 1000 / link.bandwidth_Bps)


def sharded_counts():
    counter = CommCounter()
    with counter.track():
        out = torch.zeros(2 * 6)
        dist.all_gather_into_tensor(out, torch.ones(6))  # calls all_gather_single inside: one event
        chunk = torch.zeros(3, dtype=torch.float64)
        dist.reduce_scatter_single(output=chunk, input=torch.ones(6, dtype=torch.float64))  # FSDP2's keywords
    counter.mark_step()
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))  # 20 + 10 float32 parameters
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for layer in model:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    with counter.track():
        model(torch.randn(3, 4)).sum().backward()
    events = [(e.op, e.nbytes, e.step) for e in counter.events]
    del model
    return events


def test_fsdp2_all_gathers_and_reduce_scatters_are_counted():
    events = launch(sharded_counts, 2)[0]
    direct = [e for e in events if e[2] == 0]
    assert direct == [("all_gather_into_tensor", 48, 0), ("reduce_scatter_single", 24, 0)]
    fsdp = [e[:2] for e in events if e[2] == 1]
    # forward gathers layer 1 (80 B) then layer 2 (40 B); backward gathers them again in reverse and
    # reduce-scatters each layer's gradients, keeping half of them on this rank
    assert sorted(fsdp) == sorted(
        [("all_gather_single", 80), ("all_gather_single", 40)] * 2
        + [("reduce_scatter_single", 40), ("reduce_scatter_single", 20)]
    )


def group_sizes_and_barriers():
    solo = [dist.new_group([r]) for r in range(dist.get_world_size())][dist.get_rank()]  # a 1-rank subgroup
    t = torch.ones(3)
    quiet, loud = CommCounter(), CommCounter(barriers=True)
    for counter in (quiet, loud):
        with counter.track():
            dist.barrier()
            dist.all_reduce(t, group=solo)
            dist.all_reduce(t)
    return [[(e.op, e.nbytes, e.group_size) for e in c.events] for c in (quiet, loud)]


def test_group_size_recorded_and_barriers_only_when_asked():
    quiet, loud = launch(group_sizes_and_barriers, 2)[1]
    assert quiet == [("all_reduce", 12, 1), ("all_reduce", 12, 2)]
    assert loud == [("barrier", 0, 2), ("all_reduce", 12, 1), ("all_reduce", 12, 2)]


def point_to_point_counts():
    """Every way a tensor goes to one peer: blocking, async, and as torch's schedules batch it."""
    counter, other = CommCounter(), 1 - dist.get_rank()
    before = (dist.isend, dist.irecv, dist.send, dist.recv)
    with counter.track():
        if dist.get_rank() == 0:
            dist.send(torch.zeros(10), dst=other)  # 40 bytes
            dist.isend(torch.zeros(5, dtype=torch.float64), dst=other).wait()  # 40 bytes
            ops = [dist.P2POp(dist.isend, torch.zeros(3), other)]  # 12 bytes
        else:
            dist.recv(torch.zeros(10), src=other)
            dist.irecv(torch.zeros(5, dtype=torch.float64), src=other).wait()
            ops = [dist.P2POp(dist.irecv, torch.zeros(3), other)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()
    restored = (dist.isend, dist.irecv, dist.send, dist.recv) == before
    timed = all(e.end is not None and e.end >= e.start >= 0 for e in counter.events)
    return (
        [(e.op, e.nbytes, e.peer) for e in counter.events],
        timed,
        restored,
        __file__ in {e.caller for e in counter.events},
    )


def test_point_to_point_messages_are_counted_once_with_their_peer():
    (sent, *checks0), (received, *checks1) = launch(point_to_point_counts, 2)
    assert sent == [("send", 40, 1), ("send", 40, 1), ("send", 12, 1)]
    assert received == [("recv", 40, 0), ("recv", 40, 0), ("recv", 12, 0)]
    assert checks0 == checks1 == [True, True, True]  # waits stamped, functions restored, caller is this file
