"""local_sgd.diloco: the stored study is the one the module's settings describe (so the lab's
prose and the file cannot drift apart). Its generator: tests/tools/test_studies.py."""

from __future__ import annotations

from lab_utils.labs.lab05_local_sgd import diloco, study


def test_the_stored_study_matches_the_modules_settings():
    s = diloco.load_stored()
    cfg = s.config
    assert {k: getattr(cfg, k) for k in diloco.STORED} == diloco.STORED and cfg.seeds == list(diloco.SEEDS)
    assert cfg.fresh and cfg.skew == 1.0 and len(cfg.seeds) >= 5
    # the comparisons the notebook tests are the ones the generator stored with the run
    assert cfg.comparisons == list(diloco.COMPARISONS) and cfg.alpha == diloco.ALPHA and cfg.test == diloco.TEST
    assert all(a in s.results and b in s.results for a, b in cfg.comparisons)
    assert set(s.results) == set(diloco.RUNS)
    local = cfg.rounds * cfg.H
    rounds = {"sync": cfg.warmup + local, "never": cfg.warmup + 1}  # every synchronous step, then the rounds
    for name, r in s.results.items():
        assert len(r.final) == len(diloco.SEEDS) == len(r.seeds)
        h = diloco.RUNS[name][0]
        assert r.rounds == rounds.get(name, cfg.warmup + (local // h if h else 1))
        assert r.curve[0][0] == cfg.warmup  # the first evaluation is the shared synchronous start
    assert len({tuple(r.curve[0][1]) for r in s.results.values()}) == 1


def test_run_settings_give_every_run_the_same_steps():
    for name in diloco.RUNS:
        kw = diloco.run_settings(name, H=4, rounds=3, warmup=2)
        assert kw["warmup"] in (2, 14)
    assert diloco.run_settings("never", H=4, rounds=3, warmup=2)["H"] == 12
    assert diloco.run_settings("sync", H=4, rounds=3, warmup=2)["warmup"] == 14


def test_holm_holds_the_smallest_p_to_alpha_over_m():
    assert study.holm([0.002, 0.002, 0.002, 0.002]) == [True] * 4
    assert study.holm([0.01, 0.04, 0.03]) == [True, False, False]  # 0.01 <= 0.05/3; 0.03 > 0.05/2 stops
    assert study.holm([0.04, 0.001]) == [True, True]  # 0.001 <= 0.025, then 0.04 <= 0.05
    assert study.holm([0.03, 0.001]) == [True, True]
    assert study.holm([0.03, 0.03]) == [False, False]  # Bonferroni's 0.025 for the smaller
