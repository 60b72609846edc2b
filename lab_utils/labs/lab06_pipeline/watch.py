"""Which stage a pipeline hang is stuck in: each rank writes what it is doing, the timeout reads it.

    with watch.naming_stages():          # a LaunchTimeout inside becomes a StageHang
        launch(runs.measure, 2, args=(step_fn, spec, [4]), timeout=5)
    # StageHang: stage 1 is blocked in a receive from stage 0 (the activations of micro-batch 1): ...

``launch``'s timeout can only say which ranks still ran, and in a hung pipeline all of them do.
So each rank keeps a status file (its phase, every send and receive of ``traffic.counter``), and
on a timeout the stage blocked on a message its peer never matches is named. A message's
micro-batch is its place among those between the same two stages in the same direction.
Statuses are written only inside ``naming_stages``, so timing runs pay nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from lab_utils.launcher.errors import LaunchError, LaunchTimeout

__all__ = [
    "ENV",
    "STALL_ENV",
    "Message",
    "Status",
    "StageHang",
    "StageStalled",
    "naming_stages",
    "status",
    "diagnose",
    "read_statuses",
]

ENV = "LAB_UTILS_PIPELINE_STATUS"  # the folder each rank writes its status to (set by naming_stages)
STALL_ENV = "LAB_UTILS_PIPELINE_STALL"  # seconds a send or receive may wait before its stage gives up


@dataclass(frozen=True)
class Message:
    """One send or receive in a stage's status: ``op`` ("send" / "recv"), the ``peer`` stage, and
    whether its wait has returned (``done``)."""

    op: str
    peer: int
    done: bool


@dataclass(frozen=True)
class Status:
    """One stage's last status, as read back from its file: its phase ("started", "step", "done"),
    the current step's messages in the order posted, and whether it gave up waiting (``stall_s``)."""

    stage: int
    phase: str
    messages: list[Message]
    stalled: bool = False

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Status:
        """A status file's JSON object (what the rank-side writer stores) as a Status."""
        messages = [Message(m["op"], int(m["peer"]), bool(m["done"])) for m in d["messages"]]
        return cls(int(d["stage"]), d["phase"], messages, bool(d.get("stalled", False)))


class StageHang(LaunchTimeout):
    """A pipeline run timed out; ``stage`` (or None) is where it was stuck, ``statuses`` every rank's."""

    def __init__(self, message: str, stage: int | None, statuses: dict[int, Status]):
        super().__init__(message)
        self.stage, self.statuses = stage, statuses


class StageStalled(RuntimeError):
    """Raised on a rank whose send or receive waited longer than ``naming_stages``' ``stall_s``."""


class _Status:
    """This rank's status file (rank-side): phase and point-to-point messages of the current step,
    written as JSON (``Status.from_json`` reads it back)."""

    def __init__(self, folder: str, rank: int, stall_s: float | None = None):
        self.folder, self.rank, self.stall_s = folder, rank, stall_s
        self.path = os.path.join(folder, f"stage{rank}.json")
        self.state: dict[str, Any] = {"stage": rank, "phase": "started", "messages": []}

    def phase(self, phase: str) -> None:
        """``"step"`` resets the messages (a new step begins); ``"done"`` ends the step."""
        self.state["phase"] = phase
        if phase == "step":
            self.state["messages"] = []
        self._write()

    def message(self, op: str, peer: int) -> int:
        """Record the start of a send / receive; returns its index (pass it to ``completed``)."""
        self.state["messages"].append({"op": op, "peer": peer, "done": False})
        self._write()
        return len(self.state["messages"]) - 1

    def completed(self, index: int) -> None:
        self.state["messages"][index]["done"] = True
        self._write()

    def stalled(self, world_size: int) -> StageStalled:
        """The error raised when a message waited ``stall_s``: what every stage was doing."""
        self.state["stalled"] = True  # the parent names the hang from this, whatever launch reports
        self._write()
        _, why = diagnose(read_statuses(self.folder), world_size)
        return StageStalled(f"stage {self.rank} waited {self.stall_s:g} s in a send or receive. {why}")

    def _write(self) -> None:
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.state, f)
        os.replace(tmp, self.path)  # a reader never sees half a file


_current: _Status | None = None


def status(rank: int) -> _Status | None:
    """This rank's status writer when the run is inside ``naming_stages``, else None (rank-side)."""
    global _current
    folder = os.environ.get(ENV)
    if not folder or not os.path.isdir(folder):
        return None
    if _current is None or _current.path != os.path.join(folder, f"stage{rank}.json"):
        stall = os.environ.get(STALL_ENV)
        _current = _Status(folder, rank, float(stall) if stall else None)
    return _current


def read_statuses(folder: str) -> dict[int, Status]:
    """Every rank's last status in ``folder``: {stage: Status}."""
    out = {}
    for name in sorted(os.listdir(folder)):
        if name.startswith("stage") and name.endswith(".json"):
            with open(os.path.join(folder, name)) as f:
                s = Status.from_json(json.load(f))
            out[s.stage] = s
    return out


def _count(s: Status, op: str, peer: int) -> int:
    return sum(1 for m in s.messages if m.op == op and m.peer == peer)


def _what(op: str, stage: int, peer: int, index: int) -> str:
    kind = "activations" if (peer > stage) == (op == "send") else "gradients"
    return f"the {kind} of micro-batch {index}"


def _doing(s: Status | None) -> str:
    if s is None:
        return "never started a step"
    if s.phase == "done":
        return "finished its step"
    waiting = [m for m in s.messages if not m.done]
    if waiting:
        m = waiting[-1]
        return f"is blocked in a {'send to' if m.op == 'send' else 'receive from'} stage {m.peer}"
    return "is computing (or waiting outside a send or receive)"


def diagnose(statuses: dict[int, Status], world_size: int) -> tuple[int | None, str]:
    """(stage, why and what to change): the first stage blocked on a message its peer has not
    matched; (None, a summary) when no stage is blocked on one."""
    lines = [f"stage {r}: {_doing(statuses.get(r))}" for r in range(world_size)]
    for r in range(world_size):
        s = statuses.get(r)
        if s is None or s.phase == "done":
            continue
        waiting = [m for m in s.messages if not m.done]
        if not waiting:
            continue
        m = waiting[-1]
        op, peer = m.op, m.peer
        match = "recv" if op == "send" else "send"
        index = _count(s, op, peer) - 1  # this message's place among those between r and peer
        other = statuses.get(peer)
        made = _count(other, match, r) if other is not None else 0
        if made > index:
            continue  # the peer has posted the matching op: this one is only slow
        verb = "receive from" if op == "recv" else "send to"
        other_verb = "sent" if op == "recv" else "received"
        why = (
            f"stage {r} is blocked in a {verb} stage {peer} ({_what(op, r, peer, index)}); stage {peer} "
            f"{other_verb} {made} of these in this step and {_doing(other)}. "
        )
        if other is not None and other.phase == "done":
            fix = (
                f"Stage {r} expects more messages than stage {peer} makes: make both loops agree on the number "
                f"of micro-batches and on which stage sends (a middle stage must receive AND send)."
            )
        elif other is not None and any(not m2.done and m2.peer == r for m2 in other.messages):
            fix = (
                f"Both wait for the other: make the order of sends and receives on stage {r} mirror stage "
                f"{peer}'s (a send on one side for every receive on the other, in the same order), or use "
                f"isend / irecv so that a send does not block."
            )
        else:
            fix = f"Stage {peer} has not reached the {match} that stage {r} waits for: follow stage {peer} (below)."
        return r, why + fix + "\n" + "\n".join(lines)
    if not statuses:
        return None, "no stage had started its step: start-up or set-up took the whole timeout (raise timeout=)"
    return None, "no stage is blocked in a send or receive (slow work? raise timeout=)\n" + "\n".join(lines)


@contextlib.contextmanager
def naming_stages(stall_s: float | None = None) -> Iterator[str]:
    """Pipeline runs inside write statuses; a hang leaving the block becomes a ``StageHang``
    naming the stage and the message it waits for. With ``stall_s`` a rank gives up by itself
    after waiting that long in a send or receive (however slow start-up was); without it,
    ``launch``'s timeout ends the run. Yields the status folder."""
    if stall_s is not None and not stall_s > 0:
        raise ValueError(f"stall_s={stall_s!r}: give the seconds a send or receive may wait (> 0), or None")
    folder = tempfile.mkdtemp(prefix="lab_pipeline_status_")
    saved = {k: os.environ.get(k) for k in (ENV, STALL_ENV)}
    os.environ[ENV] = folder  # launch copies the environment into every rank
    if stall_s is not None:
        os.environ[STALL_ENV] = repr(float(stall_s))
    else:
        os.environ.pop(STALL_ENV, None)
    try:
        yield folder
    except StageHang:
        raise
    except LaunchError as err:
        statuses = read_statuses(folder)
        stalled = [r for r, st in statuses.items() if st.stalled]
        if not (isinstance(err, LaunchTimeout) or stalled):
            raise  # a rank failed for another reason: launch's error says which and why
        # A stage that gave up may take a peer down with it (a rank aborting in a collective whose
        # peer left): launch then reports that rank, but the statuses still say where it hung.
        world = max(statuses, default=-1) + 1
        stage, why = diagnose(statuses, world)
        how = (
            str(err).splitlines()[0]
            if isinstance(err, LaunchTimeout)
            else f"stage {stalled[0]} gave up after {stall_s:g} s"
        )
        raise StageHang(f"{why}\n\n({how})", stage, statuses) from err
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(folder, ignore_errors=True)
