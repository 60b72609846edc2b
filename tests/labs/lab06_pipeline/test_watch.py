"""Naming the stage a pipeline hang is stuck in (no ranks needed: statuses are written here; the
grader test in test_exercises.py runs a real hang on 3 ranks)."""

from __future__ import annotations

import json
import os

import pytest

from lab_utils.labs.lab06_pipeline import watch
from lab_utils.launcher.errors import LaunchTimeout, RankDiedError, RankError


def _status(stage, phase, *messages):
    return watch.Status(stage, phase, [watch.Message(o, p, d) for o, p, d in messages])


def test_names_the_stage_waiting_for_a_message_its_peer_never_sent():
    statuses = {
        0: _status(0, "done", ("send", 1, True)),
        1: _status(1, "step", ("recv", 0, True), ("recv", 0, False)),
    }
    stage, why = watch.diagnose(statuses, 2)
    assert stage == 1
    assert why.startswith("stage 1 is blocked in a receive from stage 0 (the activations of micro-batch 1)")
    assert "sent 1 of these" in why and "finished its step" in why and "agree on the number" in why


def test_a_cycle_of_receives_names_the_first_and_asks_for_mirrored_order():
    statuses = {0: _status(0, "step", ("recv", 1, False)), 1: _status(1, "step", ("recv", 0, False))}
    stage, why = watch.diagnose(statuses, 2)
    assert stage == 0 and "(the gradients of micro-batch 0)" in why and "mirror" in why


def test_a_slow_message_whose_match_was_posted_is_not_blamed():
    statuses = {
        0: _status(0, "step", ("send", 1, False)),  # posted; stage 1 has posted its receive too
        1: _status(1, "step", ("recv", 0, True), ("send", 2, False)),
        2: _status(2, "done"),
    }
    stage, why = watch.diagnose(statuses, 3)
    assert stage == 1 and "send to stage 2" in why and "received 0 of these" in why


def test_no_blocked_stage_says_so():
    stage, why = watch.diagnose({0: _status(0, "step"), 1: _status(1, "done")}, 2)
    assert stage is None and "raise timeout=" in why
    stage, why = watch.diagnose({}, 2)  # the timeout came before any rank began its step
    assert stage is None and "start-up" in why


def test_naming_stages_turns_a_timeout_into_a_stage_hang_and_cleans_up():
    before = os.environ.get(watch.ENV)
    with pytest.raises(watch.StageHang) as err, watch.naming_stages() as folder:
        for rank in (0, 1):  # what two ranks would write, through the rank-side writer
            st = watch.status(rank)
            st.phase("step")
            if rank == 1:
                st.message("recv", 0)
        with open(os.path.join(folder, "stage1.json")) as f:  # the file format the parent reads back
            assert json.load(f) == {"stage": 1, "phase": "step", "messages": [{"op": "recv", "peer": 0, "done": False}]}
        raise LaunchTimeout("ranks [0, 1] did not finish")
    assert err.value.stage == 1 and isinstance(err.value, LaunchTimeout)
    assert err.value.statuses[1] == watch.Status(1, "step", [watch.Message("recv", 0, False)])
    assert "ranks [0, 1]" in str(err.value)  # launch's own words are kept
    assert os.environ.get(watch.ENV) == before and not os.path.exists(folder)


def test_no_status_outside_naming_stages():
    assert watch.status(0) is None


def test_a_stage_that_gave_up_becomes_a_stage_hang_and_other_errors_pass():
    with pytest.raises(watch.StageHang) as err, watch.naming_stages(stall_s=2.0):
        assert os.environ[watch.STALL_ENV] == "2.0"
        st = watch.status(0)
        st.phase("step")
        st.message("send", 1)
        st.stalled(2)  # what the stage does on its rank before raising; launch then reports it
        raise RankError(0, "StageStalled", "stage 0 waited 2 s", "")
    assert err.value.stage == 0 and "gave up after 2 s" in str(err.value) and "send to stage 1" in str(err.value)
    # launch may report another rank, one that died of it: the statuses still name the hang
    with pytest.raises(watch.StageHang) as err, watch.naming_stages(stall_s=2.0):
        st = watch.status(1)
        st.phase("step")
        st.message("recv", 0)
        st.stalled(2)
        raise RankDiedError(0, -6)
    assert err.value.stage == 1 and "gave up after 2 s" in str(err.value)
    assert watch.STALL_ENV not in os.environ
    with pytest.raises(RankError, match="ZeroDivisionError"), watch.naming_stages(stall_s=2.0):  # not a hang
        raise RankError(1, "ZeroDivisionError", "division by zero", "")
    with pytest.raises(ValueError, match="stall_s=0"), watch.naming_stages(stall_s=0):
        pass
