"""hf.guards: each launch trap becomes an error that names the fix."""

from __future__ import annotations

import socket
from types import SimpleNamespace

import pytest
from accelerate import Accelerator

from lab_utils import accelerate_meter
from lab_utils.labs.lab04_hf import guards


def test_port_guard():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        with pytest.raises(RuntimeError, match=f"port {taken} is already taken"):
            guards.check_port_free(taken)
    assert guards.check_port_free(taken) == taken  # released


def test_accelerator_guard():
    with accelerate_meter.fresh_accelerate():
        guards.check_no_accelerator()
        Accelerator(cpu=True)
        assert guards.accelerator_exists()
        with pytest.raises(RuntimeError, match="notebook_launcher refuses"):
            guards.check_no_accelerator()
    assert not guards.accelerator_exists()


def test_process_guard_explains_both_fallbacks(monkeypatch):
    alone = SimpleNamespace(num_processes=1, device="cpu")
    guards.check_processes(alone, None)
    guards.check_processes(alone, 1)
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(RuntimeError, match=r"cpu=True"):
        guards.check_processes(alone, 2)
    monkeypatch.delenv("WORLD_SIZE")
    with pytest.raises(RuntimeError, match=r"--cpu --num_processes 2` starts ONE process"):
        guards.check_processes(alone, 2)
