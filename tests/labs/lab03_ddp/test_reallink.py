"""reallink, the data module the lab shows the real-link validation with: the stored run loads
(package data beside the module), its table and its misses by term. The measurement itself is
tested with its apparatus (tests/tools/test_validate_link.py)."""

from __future__ import annotations

import pytest

from lab_utils.labs.lab03_ddp import reallink


def test_bad_config_is_refused():
    with pytest.raises(ValueError, match="rounds"):
        reallink.Config(rounds=(0,))
    with pytest.raises(ValueError, match="ks"):
        reallink.Config(ks=(0,))
    with pytest.raises(ValueError, match="repeats"):
        reallink.Config(repeats=0)


def test_the_stored_run_loads_and_round_trips(tmp_path):
    real = reallink.load()
    assert reallink.STORED.name == "real_link.json" and reallink.STORED.parent.name == "lab03_ddp"
    assert real.points and all(isinstance(p, reallink.Point) for p in real.points)
    assert reallink.Config(**{k: tuple(v) if isinstance(v, list) else v for k, v in real.config.items()})
    out = tmp_path / "real_link.json"
    out.write_text(real.to_json())
    assert reallink.load(out) == real


def test_table_shows_links_points_terms_and_verdicts():
    real = reallink.load()
    text = reallink.table(real)
    assert real.when in text and real.load_before in text and "where the time went" in text
    assert text.count("within 10 % at") == 2
    flagged = [line for line in text.splitlines() if line.rstrip().split()[-2:-1] == ["*"]]
    assert len(flagged) == sum(abs(p.measured_terms.total_s / p.model_terms.total_s - 1) > 0.10 for p in real.points)


def test_table_parts_fit_a_cell_each():
    real = reallink.load()
    parts = {part: reallink.table(real, parts=(part,)) for part in reallink.PARTS}
    assert reallink.table(real) == "\n\n".join(parts.values())  # all parts by default, in order
    assert parts["points"].count("within 10 % at") == 2 and "where the time went" in parts["terms"]
    assert len(reallink.table(real, parts=("links", "savings")).splitlines()) <= 20
    with pytest.raises(ValueError, match="unknown parts"):
        reallink.table(real, parts=("point",))


def test_misses_add_up_to_the_whole_miss():
    measured = reallink.Terms(compute_s=0.6, wait_s=0.4, peer_s=0.15, rest_s=0.2)
    model = reallink.Terms(compute_s=0.5, wait_s=0.3, peer_s=0.0, rest_s=0.1)
    off = reallink.misses(measured, model)
    assert tuple(off) == reallink.MISS_TERMS
    assert off == pytest.approx({"compute": 0.1, "peer": 0.15, "link": -0.05, "rest": 0.1})
    assert sum(off.values()) == pytest.approx(measured.total_s - model.total_s)
    for p in reallink.load().points:
        got = reallink.misses(p.measured_terms, p.model_terms)
        assert sum(got.values()) == pytest.approx(p.measured_terms.total_s - p.model_terms.total_s)


def test_error_is_the_models_signed_error():
    p = reallink.Point(229.0, 2, "naive", measured_s=0.2, q1_s=0.19, q3_s=0.21, model_s=0.15, contended_s=0.25)
    assert p.error == pytest.approx(-0.25)  # (model - measured) / measured: the model predicted too little
    assert p.contended_error == pytest.approx(0.25)


def test_every_stored_run_loads_oldest_first_the_lab_s_last():
    runs = reallink.runs()
    assert len(runs) >= 2 and runs[-1] == reallink.load()
    assert [r.when for r in runs] == sorted(r.when for r in runs)
    assert all(r.config == runs[-1].config for r in runs)


def test_a_run_predicted_from_itself_is_its_contended_model():
    # recomputed from the stored inputs (buckets, link, contention) with the model as it is now,
    # it gives what run.py computed when the run was recorded
    run = reallink.load()
    assert "bucket_list" in run.micro
    assert reallink.predicted(run, run) == pytest.approx([p.contended_error for p in run.points], abs=1e-12)


def test_a_prediction_takes_the_link_and_contention_from_the_calibration_only():
    import copy

    runs = [r for r in reallink.runs() if all("round_s" in lk for lk in r.links)]
    target, calibration = runs[-1], runs[-2]
    want = reallink.predicted(calibration, target)
    other = copy.deepcopy(target)  # the target's own link and contention play no part
    for lk in other.links:
        lk.update(beta_Bps=lk["beta_Bps"] / 2, bucket_alpha_s=10 * lk["bucket_alpha_s"], contention=[3.0, 3.0])
    assert reallink.predicted(calibration, other) == want
    moved = copy.deepcopy(calibration)  # the calibration's do
    for lk in moved.links:
        lk.update(beta_Bps=lk["beta_Bps"] / 2)
    got = reallink.predicted(moved, target)
    assert all(a >= b for a, b in zip(got, want)) and any(a > b for a, b in zip(got, want))


def test_runs_without_bucket_times_calibrate_but_cannot_be_predicted():
    old, new = reallink.runs()[0], reallink.load()
    assert len(reallink.predicted(old, new)) == len(new.points)
    with pytest.raises(ValueError, match="no bucket ready times"):
        reallink.predicted(new, old)


def test_cross_predictions_pair_each_new_run_with_every_other_run_of_its_apparatus():
    runs = reallink.runs()
    same = [r.when for r in runs if all("round_s" in lk for lk in r.links)]
    targets = [r.when for r in runs if "bucket_list" in r.micro]
    got = reallink.cross_predictions(runs)
    assert sorted(got) == sorted((t, c) for t in targets for c in same if c != t)


def test_noise_floor_and_headline():
    run = reallink.load()
    one = {(p.rate_mbit, p.loop): p.measured_s for p in run.points if p.k == 1}
    assert reallink.noise_floor(run) == max(abs(one[r, "naive"] / one[r, "no_sync"] - 1) for r, _ in one)
    rows = reallink.headline(run, k=4).splitlines()
    assert len(rows) == 1 + len(run.links) and "model error" in rows[0]
    assert reallink.signed([-0.1, 0.3]) == "mean +10 %, range -10 .. +30 %"
