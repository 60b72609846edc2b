"""reducer.probe: DDP's flag at forward time decides whether the backward all-reduces."""

from __future__ import annotations

import pytest

from lab_utils.labs.lab03_ddp import reducer

pytestmark = pytest.mark.usefixtures("no_orphans")


def test_reducer_flags_around_no_sync(runs):
    rows = {r.scenario: r for r in runs[0]["probe"]}
    assert list(rows) == list(reducer.SCENARIOS)
    n_params = 8
    synced = {
        "plain step": True,
        "forward + backward inside no_sync": False,
        "forward outside, backward inside": True,
        "forward inside, backward outside": False,
        "plain step after it (grads kept)": True,
    }
    for name, sync in synced.items():
        r = rows[name]
        # Only the flag at forward time decides: it arms the reducer, and the backward obeys.
        assert r.flag_at_forward == r.prepare_for_backward == r.forward_param_sync == sync, name
        assert r.comm_hook_calls == (1 if sync else 0), name
        assert r.grads_equal == sync, name
        assert r.grad_hooks == n_params, name  # autograd hooks fire regardless
        assert r.reducer_hooks == (n_params if sync else 0), name  # the reducer's own hook returns early
    assert rows["forward outside, backward inside"].flag_at_backward is False
    assert rows["forward inside, backward outside"].flag_at_backward is True


def test_spy_passes_everything_through():
    class Real:
        def prepare_for_backward(self, outputs):
            return ("real", outputs)

        other = 7

    spy = reducer.ReducerSpy(Real())
    assert spy.prepare_for_backward([1]) == ("real", [1])
    assert spy.calls == ["prepare_for_backward"] and spy.other == 7
