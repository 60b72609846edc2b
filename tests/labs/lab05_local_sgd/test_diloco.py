"""local_sgd.diloco: the stored study is the one the module's settings describe (so the lab's
prose and the file cannot drift apart). Its generator: tests/tools/test_studies.py."""

from __future__ import annotations

from lab_utils.labs.lab05_local_sgd import diloco


def test_the_stored_study_matches_the_modules_settings():
    s = diloco.load_stored()
    cfg = s.config
    assert {k: getattr(cfg, k) for k in diloco.STORED} == diloco.STORED and cfg.seeds == list(diloco.SEEDS)
    assert set(s.results) == {f"{lr}/{mu}" for lr, mu in diloco.GRID}
    for r in s.results.values():
        assert len(r.final) == len(diloco.SEEDS) == len(r.seeds)
        # every synchronous step all-reduces the gradients, every round the outer gradient
        assert r.rounds == cfg.warmup + cfg.rounds
