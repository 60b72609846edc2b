"""The real-link validation: namespaces, a shaped veth, two gloo ranks, a table; cleaned up always.

No verdict on the clock here (the machine may be busy): the run must finish, shape the link (a
bulk all-reduce cannot beat the tbf rate), fill its table and leave no namespace behind."""

from __future__ import annotations

import os
import subprocess

import pytest

from lab_utils.labs.lab03_ddp import netns, reallink

REASON = reallink.unavailable()


def _ours() -> list[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line for line in listed.splitlines() if line.startswith(f"l3v{os.getpid()}")]


def test_says_why_it_cannot_run_without_root(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert "needs root" in reallink.unavailable()
    with pytest.raises(RuntimeError, match="needs root"):
        reallink.run(reallink.Config())


def test_bad_config_is_refused():
    with pytest.raises(ValueError, match="rounds"):
        reallink.Config(rounds=(0,))
    with pytest.raises(ValueError, match="ks"):
        reallink.Config(ks=(0,))


@pytest.mark.skipif(REASON is not None, reason=REASON or "")
def test_namespaces_are_removed_when_the_body_fails():
    with pytest.raises(KeyError), netns.Namespaces():
        assert len(_ours()) == 2
        raise KeyError("the run failed")
    assert _ours() == []


@pytest.mark.skipif(REASON is not None, reason=REASON or "")
def test_runs_on_a_shaped_link_and_writes_its_table(tmp_path):
    config = reallink.Config(rounds=(3.0, 1.0, 0.3), ks=(1, 2), repeats=1, micro_batch=64, timeout_s=180)
    result = reallink.run(config, log=lambda _: None)
    assert _ours() == []
    assert [(p.k, p.loop) for p in result.points] == [(1, "naive"), (1, "no_sync"), (2, "naive"), (2, "no_sync")] * 3
    assert all(p.measured_s > 0 and p.model_s > 0 and p.contended_s >= p.model_s * 0.999 for p in result.points)
    rates = [lk["rate_mbit"] for lk in result.links]
    assert rates == sorted(rates) and rates[0] * 5 < rates[-1]  # slow to fast, 10 x apart by construction
    for lk in result.links:  # the compute thread's CPU time and its lost cores were read (getrusage)
        assert lk["compute_cpu"] > -1 and all(isinstance(n, int | float) and n >= 0 for n in lk["preempted"])
    for lk in result.links:  # tbf really limits the link: a bulk all-reduce cannot beat its rate
        # (its own time, each rank sending every byte once; beta = bytes / (bulk - tiny) is not
        # bounded so: on a loaded machine a slow tiny all-reduce can shrink the difference)
        assert 8 * result.micro["grad_bytes"] / lk["bulk_s"] / 1e6 < 1.3 * lk["rate_mbit"]
        assert lk["bucket_alpha_s"] >= lk["alpha_s"] > 0 and lk["round_s"] > 0
    for p in result.points:  # the stamped terms add up to the measured update, the model's to the model
        m = p.measured_terms
        assert m.total_s == pytest.approx(p.measured_s, abs=1e-9)  # one repeat: it is the median
        assert m.compute_s > 0 and 0 <= m.peer_s <= m.wait_s and m.rest_s >= 0
        assert p.model_terms.total_s == pytest.approx(p.contended_s) and p.model_terms.peer_s == 0
    text = reallink.table(result)
    assert "within 10 % at" in text and result.load_before in text and "where the time went" in text
    out = tmp_path / "real_link.json"
    out.write_text(result.to_json())
    assert reallink.load(out).points == result.points
