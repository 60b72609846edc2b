"""tools.validate_link: lab 3's real-link validation. Namespaces, a shaped veth, two gloo ranks, a
table; cleaned up always. And its split of an update into terms, measured and modelled.

No verdict on the clock here (the machine may be busy): the run must finish, shape the link (a
bulk all-reduce cannot beat the tbf rate), fill its table and leave no namespace behind. The
runs on a real link need root (network namespaces and tc) and skip without it."""

from __future__ import annotations

import os
import subprocess
from dataclasses import asdict

import pytest

from lab_utils.labs.lab03_ddp import reallink
from lab_utils.labs.lab03_ddp.stamps import Micro, Update
from lab_utils.netmodel import Bucket, Contention, Link, MicroStep, naive_update_seconds, no_sync_update_seconds
from tools.validate_link import netns, run

REASON = netns.unavailable()


def _ours() -> list[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line for line in listed.splitlines() if line.startswith(f"l3v{os.getpid()}")]


def test_says_why_it_cannot_run_without_root(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert "needs root" in netns.unavailable()
    with pytest.raises(RuntimeError, match="needs root"):
        run.run(reallink.Config())


def test_the_ranks_module_is_found_from_the_repository_root():
    """``ip netns exec NS python -m tools.validate_link.rank``: the rank module exists where the
    runner starts it (the repository root, on the rank's path, since ``tools`` is not installed)."""
    assert (run.ROOT / (run._RANK_MODULE.replace(".", "/") + ".py")).is_file()
    assert (run.ROOT / "lab_utils" / "labs" / "lab03_ddp" / "reallink.py").is_file()


@pytest.mark.skipif(REASON is not None, reason=REASON or "")
def test_namespaces_are_removed_when_the_body_fails():
    with pytest.raises(KeyError), netns.Namespaces():
        assert len(_ours()) == 2
        raise KeyError("the run failed")
    assert _ours() == []


@pytest.mark.skipif(REASON is not None, reason=REASON or "")
@pytest.mark.slow
def test_runs_on_a_shaped_link_and_writes_its_table(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the ranks must not depend on the caller's directory
    config = reallink.Config(rounds=(3.0, 1.0, 0.3), ks=(1, 2), repeats=1, micro_batch=64, timeout_s=180)
    result = run.run(config, log=lambda _: None)
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


# Two ranks' stamps of one naive update with K = 2 (seconds on their shared clock). Rank 0: each
# micro-step forward 0.1, backward 0.2; the other rank finished its backwards 0.1 and 0.05 later.
MINE = Update(0.0, 1.2, [Micro(0.0, 0.1, 0.3, [[0.2, 0.45]]), Micro(0.5, 0.6, 0.8, [[0.7, 0.9]])], [1.0, 1.1])
PEER = Update(0.0, 1.2, [Micro(0.0, 0.1, 0.4, [[0.3, 0.45]]), Micro(0.5, 0.6, 0.85, [[0.7, 0.9]])], [1.0, 1.1])


def test_measured_terms_of_stamps_by_hand():
    t = run.measured(MINE, PEER)
    # compute 2 x (0.1 + 0.2); wait (0.5 - 0.3) + (1.0 - 0.8), of it 0.1 + 0.05 for the peer;
    # rest: the optimizer step (0.1) and the time after it (0.1)
    assert (t.compute_s, t.wait_s, t.peer_s, t.rest_s) == pytest.approx((0.6, 0.4, 0.15, 0.2))
    assert t.total_s == pytest.approx(MINE.end - MINE.begin) and t.link_s == pytest.approx(0.25)
    # a micro-step inside no_sync (no all-reduce) waits for no peer, however late the peer is
    quiet = Update(0.0, 1.2, [Micro(0.0, 0.1, 0.3, []), MINE.micros[1]], MINE.optimizer)
    assert run.measured(quiet, PEER).peer_s == pytest.approx(0.05)
    with pytest.raises(ValueError, match="stamped 2 and 1 micro-steps"):
        run.measured(MINE, Update(0.0, 1.2, PEER.micros[:1], PEER.optimizer))


def test_an_update_comes_back_from_its_json_form():
    assert run.update(asdict(MINE)) == MINE


@pytest.mark.parametrize("loop, fn", [("naive", naive_update_seconds), ("no_sync", no_sync_update_seconds)])
@pytest.mark.parametrize("contention", [None, Contention(0.3, 0.5)])
def test_model_terms_add_up_to_the_model(loop, fn, contention):
    micro = MicroStep(0.010, 0.020, [Bucket(0.008, 2e6), Bucket(0.020, 1e6)])
    link = Link("test", 1e-4, 1e8)
    for k in (1, 3):
        terms = run.modelled(micro, k, loop, link, optimizer_s=0.002, contention=contention)
        assert terms.total_s == pytest.approx(fn(micro, k, link, 2, optimizer_s=0.002, contention=contention))
        assert terms.peer_s == 0 and terms.wait_s > 0
    with pytest.raises(ValueError, match="'naive' or 'no_sync'"):
        run.modelled(micro, 2, "forward_outside", link, optimizer_s=0.0)


def test_a_new_run_keeps_the_one_it_replaces(tmp_path):
    out = tmp_path / "real_link.json"
    assert run.keep_previous(out) is None  # nothing there yet
    out.write_text(reallink.load().to_json())
    kept = run.keep_previous(out)
    when = reallink.load().when  # "2026-12-02 12:13 UTC" -> real_link.2026-12-02-1213.json
    assert kept.name == f"real_link.{when[:10]}-{when[11:13]}{when[14:16]}.json" and kept.read_text() == out.read_text()
    assert kept.match("real_link.*.json")  # the pattern reallink.runs() reads
